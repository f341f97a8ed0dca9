#!/usr/bin/env python3
"""bench/stale_stability.py — how far a one-step-stale gradient shrinks the learning rate a
momentum optimizer tolerates (the reason PipeDream-2BW's rule lags at aggressive learning rates).

On one direction of curvature h, AdamW near its steady state moves like EMA momentum with a
per-coordinate step eta (lr / sqrt(v)):
    m_t     = beta * m_{t-1} + (1 - beta) * g
    x_{t+1} = x_t - eta * m_t
with g = h * x_t (synchronous: DP, GPipe, 1F1B) or g = h * x_{t-1} (2BW: the gradient of batch t
is taken at the previous weight version). The iteration is a linear map; it is stable while its
spectral radius is below 1. This prints the largest stable eta*h for both, from the eigenvalues
(a scan, then bisection), beside the closed forms: 2(1+beta)/(1-beta) synchronous, 1 stale (the stale
characteristic polynomial z^2 - (1+beta) z + beta + eta*h*(1-beta) has complex roots of squared
modulus beta + eta*h*(1-beta)).
--corrections also tries, at beta 0.9, a Nesterov-style correction of the stale step,
x_{t+1} = x_t - eta * (m_t + c (m_t - m_{t-1})) (c = beta is the "spike compensation" of delayed momentum
for delay 1), to see how much of the synchronous limit such a change of the rule wins back.

    python3 bench/stale_stability.py [--betas 0,0.5,0.8,0.9,0.95,0.99] [--corrections 0.5,0.9,2,5]
"""
import argparse

import numpy as np


def iteration(eta_h, beta, stale, c=0.0):
    """the linear map on (x_t, x_{t-1}, m_{t-1}); step m_t + c (m_t - m_{t-1})"""
    a = 1.0 - beta
    m_t = np.array([0.0, a, beta]) if stale else np.array([a, 0.0, beta])
    step = (1.0 + c) * m_t - c * np.array([0.0, 0.0, 1.0])
    return np.vstack([np.array([1.0, 0.0, 0.0]) - eta_h * step, [1.0, 0.0, 0.0], m_t])


def stable(eta_h, beta, stale, c=0.0):
    return max(abs(np.linalg.eigvals(iteration(eta_h, beta, stale, c)))) < 1.0


def largest_stable(beta, stale, c=0.0):
    """the first eta*h (scanning up from 0) where the iteration stops being stable"""
    grid = np.linspace(1e-3, 1e3, 200001)
    lo = 0.0
    for e in grid:                 # coarse: stability can return after a gap, so scan
        if not stable(e, beta, stale, c):
            break
        lo = e
    hi = lo + grid[1] - grid[0]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if stable(mid, beta, stale, c) else (lo, mid)
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--betas", default="0,0.5,0.8,0.9,0.95,0.99")
    ap.add_argument("--corrections", default="0.5,0.9,2,5")
    a = ap.parse_args()
    print("| beta1 | largest stable eta*h, synchronous (closed form) | one-step stale (closed form) | ratio |")
    print("|---|---|---|---|")
    for beta in (float(b) for b in a.betas.split(",")):
        sync, stale = largest_stable(beta, False), largest_stable(beta, True)
        print(f"| {beta:g} | {sync:.3f} ({2 * (1 + beta) / (1 - beta):.3f}) | {stale:.3f} (1) | {sync / stale:.0f}x |")
    if a.corrections:
        beta, sync = 0.9, largest_stable(0.9, False)
        print("\n| beta1 | c | largest stable eta*h, stale with correction | synchronous without |")
        print("|---|---|---|---|")
        for c in (float(x) for x in a.corrections.split(",")):
            print(f"| {beta:g} | {c:g} | {largest_stable(beta, True, c):.3f} | {sync:.3f} |")

if __name__ == "__main__":
    main()
