#!/usr/bin/python3
"""Summarize a bench/bench_train.sh output directory into per-run lines and a markdown table.

usage: bench/summarize.py OUT_DIR [--peak 290]

Per run: loom = median step_ms of its --metrics lines after dropping the first 2 steps;
torch = the peer's RESULT median_ms (also after 2 warm-up steps). Per (config, engine):
the median over rounds. FLOPs per step come from loom's metrics (mfu * peak * step time),
the same count is used for torch. Ratios: tok/s of the row / tok/s of torch, as the ratio
of the round medians and, in brackets, the median of the per-round paired ratios.
"""
import argparse
import glob
import json
import os
import re
import statistics

SHAPES = {  # name: (L, H, C, V, T, B, block_size)
    "124m": (12, 12, 768, 50257, 64, 4, 1024),
    "124m256": (12, 12, 768, 50257, 256, 4, 1024),
    "30m": (6, 6, 384, 50257, 256, 4, 256),
}
LABELS = {"124m": "GPT-2 124M (L12 H12 C768, T64 B4)", "124m256": "GPT-2 124M (L12 H12 C768, T256 B4)",
           "30m": "30M (L6 H6 C384, T256 B4)"}
ENGINES = [("loom", "loom"), ("loom_recompute", "loom --recompute"), ("torch", "PyTorch peer"),
           ("loom_openblas", "loom LOOM_MATMUL=openblas"), ("loom_blis", "loom LOOM_MATMUL=blis"),
           ("loom_onednn", "loom LOOM_MATMUL=onednn"), ("loom_before", "loom (--before build)"),
           ("loom_bf16", "loom --dtype bf16"), ("torch_bf16", "PyTorch peer, autocast bf16"),
           ("loom_before_bf16", "loom --dtype bf16 (--before build)")]


def analytic_flops(cfg):
    L, H, C, V, T, B, _ = SHAPES[cfg]
    bt = B * T
    return 6.0 * (12 * L * C * C + V * C) * bt + 12.0 * L * T * C * bt


def read_loom(out, tag, peak):
    steps = []
    with open(os.path.join(out, tag + ".jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if "step_ms" in d:
                steps.append(d)
    if len(steps) < 3:
        raise SystemExit(f"{tag}: only {len(steps)} step lines")
    ms = statistics.median(d["step_ms"] for d in steps[2:])
    flops = statistics.median(d["mfu"] * peak * 1e9 * d["step_ms"] / 1e3 for d in steps)
    with open(os.path.join(out, tag + ".time")) as f:  # /usr/bin/time "%M %e %U %S"
        kib = int([l for l in f.read().split("\n") if l.strip()][-1].split()[0])
    return {"ms": ms, "flops": flops, "rss": kib / 1024.0, "steps_ms": [d["step_ms"] for d in steps]}


def read_torch(out, tag):
    with open(os.path.join(out, tag + ".log")) as f:
        res = [l for l in f if l.startswith("RESULT ")]
    if not res:
        raise SystemExit(f"{tag}: no RESULT line")
    d = json.loads(res[-1][len("RESULT "):])
    return {"ms": d["median_ms"], "rss": d["peak_rss_mib"], "flops": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--peak", type=float, default=290.0)
    ap.add_argument("--peak-bf16", type=float, default=0.0, help="the bf16 rows' MFU denominator")
    a = ap.parse_args()

    kept = {}  # tag -> {"kept": attempt, "foreign": share of the CPUs other processes used}
    kp = os.path.join(a.out, "kept.jsonl")
    if os.path.exists(kp):
        for line in open(kp):
            d = json.loads(line)
            kept[d["tag"]] = d
    attempts = {}
    rp = os.path.join(a.out, "runs.jsonl")
    if os.path.exists(rp):
        for line in open(rp):
            d = json.loads(line)
            attempts[d["tag"]] = attempts.get(d["tag"], 0) + 1

    runs = {}  # (cfg, engine) -> {round: result}
    for path in sorted(glob.glob(os.path.join(a.out, "*_r[0-9]*.log"))):
        tag = os.path.basename(path)[:-4]
        m = re.fullmatch(r"(\w+?)_(loom|loom_recompute|torch|loom_openblas|loom_blis|loom_onednn|loom_before"
                         r"|loom_bf16|torch_bf16|loom_before_bf16)_r(\d+)", tag)
        if not m:
            continue
        cfg, eng, rnd = m.group(1), m.group(2), int(m.group(3))
        try:
            res = read_torch(a.out, tag) if eng.startswith("torch") else read_loom(a.out, tag, a.peak)
        except (OSError, ValueError, SystemExit) as e:
            print(f"skipping {tag}: {e}")
            continue
        res["foreign"] = kept.get(tag, {}).get("foreign")
        res["attempts"] = attempts.get(tag, 1)
        runs.setdefault((cfg, eng), {})[rnd] = res

    cfgs = [c for c in SHAPES if any((c, e) in runs for e, _ in ENGINES)]
    print("\n### Per run (median ms/step of the timed steps; foreign = share of the machine's CPUs that other"
          " processes used during the kept attempt; attempts = runs made, disturbed ones repeated)\n")
    for cfg in cfgs:
        for eng, name in ENGINES:
            for rnd, r in sorted(runs.get((cfg, eng), {}).items()):
                extra = ""
                if "steps_ms" in r:
                    extra = "  all steps: " + " ".join(f"{x:.0f}" for x in r["steps_ms"])
                print(f"- {cfg} {name:17s} round {rnd}: {r['ms']:9.1f} ms  rss {r['rss']:7.1f} MiB"
                      f"  foreign {r['foreign']}  attempts {r['attempts']}{extra}")

    rows = []
    for cfg in cfgs:
        L, H, C, V, T, B, _ = SHAPES[cfg]
        bt = B * T
        fl = [r["flops"] for e, _ in ENGINES if not e.startswith("torch")
              for r in runs.get((cfg, e), {}).values()
              if r["flops"]]
        flops = statistics.median(fl) if fl else analytic_flops(cfg)
        print(f"\n{cfg}: FLOPs/step from loom's metrics {flops / 1e9:.2f} GFLOP"
              f" (analytic 6*N_matmul*BT + attention: {analytic_flops(cfg) / 1e9:.2f} GFLOP)")
        for eng, name in ENGINES:
            rr = runs.get((cfg, eng), {})
            if not rr:
                continue
            bf = eng.endswith("_bf16")  # against the peer in the same precision, MFU vs its peak
            torch_runs = runs.get((cfg, "torch_bf16" if bf else "torch"), {})
            torch_ms = statistics.median(r["ms"] for r in torch_runs.values()) if torch_runs else None
            peak = a.peak_bf16 if bf and a.peak_bf16 else a.peak
            ms = statistics.median(r["ms"] for r in rr.values())
            lo, hi = min(r["ms"] for r in rr.values()), max(r["ms"] for r in rr.values())
            rss = statistics.median(r["rss"] for r in rr.values())
            gfs = flops / (ms / 1e3) / 1e9
            ratio = paired = None
            if torch_ms:
                ratio = torch_ms / ms
                pr = [torch_runs[k]["ms"] / rr[k]["ms"] for k in rr if k in torch_runs]
                paired = statistics.median(pr) if pr else None
            rows.append((LABELS[cfg], name, ms, lo, hi, bt / (ms / 1e3), gfs, gfs / peak, rss, ratio,
                         paired, len(rr)))

    bfp = f", bf16 rows vs {a.peak_bf16:.0f} GFLOP/s bf16 peak" if a.peak_bf16 else ""
    print(f"\n### Results (median over rounds; MFU vs {a.peak:.0f} GFLOP/s fp32 peak{bfp}; ratios against"
          " the peer in the same precision)\n")
    print("| config | engine | ms/step (min–max) | tok/s | GFLOP/s | MFU | peak RSS MiB | tok/s vs torch (paired) |")
    print("|---|---|---|---|---|---|---|---|")
    for (lab, name, ms, lo, hi, tps, gfs, mfu, rss, ratio, paired, n) in rows:
        rs = "—" if ratio is None else f"{ratio:.2f}×" + ("" if paired is None else f" ({paired:.2f}×)")
        print(f"| {lab} | {name} | {ms:,.0f} ({lo:,.0f}–{hi:,.0f}) | {tps:.1f} | {gfs:.1f} | {100 * mfu:.1f}% "
              f"| {rss:,.0f} | {rs} |")


if __name__ == "__main__":
    main()
