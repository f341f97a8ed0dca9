#!/usr/bin/env python3
"""bench/bench_peer_summary.py OUT TAU WARM ACC B T N PPFLAGS — the markdown tables of bench/bench_peer.sh
from the files it leaves in OUT (per-peer metrics OUT/TAG/ID.jsonl, MPI rank-0 metrics OUT/TAG.ts
with a wall-clock timestamp per line, OUT/TAG.rc). N: the machines; PPFLAGS: the pipeline's
--pp/--dp flags (a "--dp 2" there doubles its tokens per step)."""
import glob, json, os, re, statistics, sys

out, tau, warm, acc, B, T, N = sys.argv[1], *map(int, sys.argv[2:8])
ppdp = 2 if "--dp 2" in (sys.argv[8] if len(sys.argv) > 8 else "") else 1
med = statistics.median


def rc_of(tag):
    try:
        return json.load(open(f"{out}/{tag}.rc"))
    except OSError:
        return None


def peer_rows(path):
    steps, val = [], None
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "step_ms" in j:
            steps.append(j)
        elif "val_loss" in j:
            val = j["val_loss"]
    return steps, val


def peer_log(path):
    t = open(path, errors="replace").read()
    m = re.search(r"sent ([0-9.]+) MiB, received ([0-9.]+) MiB", t)
    v = re.findall(r"val loss ([0-9.]+)", t)
    return (float(m.group(1)) if m else None), (float(v[-1]) if v else None), t


def swarm_tput(tag):
    peers = {}
    for f in sorted(glob.glob(f"{out}/{tag}/*.jsonl")):
        pid = os.path.basename(f)[:-6]
        rows, _ = peer_rows(f)
        sent, _, txt = peer_log(f[:-6] + ".log")
        lost = re.search(r"([0-9]+) connections lost", txt)
        timed = [j for j in rows if j["round"] > warm]
        if not timed:
            continue
        rounds = sorted({j["round"] for j in timed})
        rms = [sum(j["step_ms"] for j in timed if j["round"] == r) for r in rounds]
        waits = {j["round"]: j["wait_ms"] for j in rows}
        peers[pid] = dict(tps=B * T * len(timed) / sum(j["step_ms"] for j in timed) * 1000,
                          round_ms=med(rms), rounds=rounds, wait=[waits[r] for r in sorted(waits)],
                          sent_per_round=(sent / max(j["round"] for j in rows)) if sent else None,
                          view=sorted({j["view"] for j in rows}), averaged=sorted({j["averaged"] for j in rows}),
                          lost=int(lost.group(1)) if lost else None)
    return peers


def pct(x, bound):
    return f"{100 * x / bound:.1f}%" if bound else "—"


def ts_rows(tag):
    rows = []
    try:
        for line in open(f"{out}/{tag}.ts"):
            t, j = line.split(" ", 1)
            j = json.loads(j)
            rows.append((float(t), j))
    except OSError:
        pass
    return rows


def alone_tps(tag, path=None):
    """tok/s of one process alone on one machine's share: B*T / median step_ms after the warm rounds"""
    try:
        rows = [json.loads(x) for x in open(path or f"{out}/{tag}.jsonl") if '"step_ms"' in x]
    except OSError:
        return None
    timed = [j["step_ms"] for j in rows if j["step"] > warm * tau] or [j["step_ms"] for j in rows[1:]]
    return B * T / med(timed) * 1000 if timed else None


print(f"### Throughput ({N} machines x 1 thread: each peer / rank in its own CPU cgroup)\n")
print("| link | run | tok/s | of the bound | s per step (per peer/rank) | exposed wait | MiB sent per round per peer | notes |")
print("|---|---|---|---|---|---|---|---|")
names = {"100mbit": "100 Mbit/s + 5 ms (wirelay)", "100mbit-tbf": "100 Mbit/s (tbf)", "20mbit": "20 Mbit/s (tbf)",
         "10mbit": "10 Mbit/s (tbf)", "1gbit": "1 Gbit/s (tbf)"}
for s in names:
    bound = None
    for m in ("alone", "together", "swarm", "co2", "dp", "1f1b", "2bw"):
        tag = f"tput_{s}_{m}"
        rc = rc_of(tag)
        if rc is None:
            continue
        if m == "alone":
            a = alone_tps(tag)
            if rc["rc"] or a is None:
                print(f"| {names[s]} | one machine alone | FAILED (rc {rc['rc']}) | | | | | |")
                continue
            bound = N * a
            print(f"| {names[s]} | one machine alone ×{N} (the bound) | **{bound:,.0f}** ({a:,.0f} × {N}) | 100% "
                  f"| {B * T / a:.2f} | — | — | `loom train`, no network; wall {rc['wall_s']} s |")
            continue
        if m == "together":
            each = [alone_tps(tag, f"{out}/{tag}/m{i}.jsonl") for i in range(N)]
            if rc["rc"] or None in each:
                print(f"| {names[s]} | {N} machines alone at once | FAILED (rc {rc['rc']}) | | | | | |")
                continue
            tps = sum(each)
            print(f"| {names[s]} | {N} machines alone at once (no network) | **{tps:,.0f}** (sum of {' / '.join(f'{x:.0f}' for x in each)}) "
                  f"| {pct(tps, bound)} | {B * T * N / tps:.2f} | — | — | {N} independent `loom train`s, one per machine; wall {rc['wall_s']} s |")
            continue
        lab = {"swarm": f"`loom peer` swarm τ {tau}", "co2": f"MPI CO2 τ {tau}", "dp": "MPI sync DP",
               "1f1b": f"pipeline 1f1b K={acc}", "2bw": f"pipeline 2bw K={acc}"}[m]
        if m == "swarm":
            p = swarm_tput(tag)
            if rc["rc"] or len(p) < N:
                print(f"| {names[s]} | {lab} | FAILED (rc {rc['rc']}, {len(p)} peers with timed rounds) | | | | | |")
                continue
            tps = sum(x["tps"] for x in p.values())
            rms = med([x["round_ms"] for x in p.values()])
            # wait_ms of round r is paid at the end of round r + 1 (inside that step's step_ms); the
            # last round's average is waited for after the last step (a drain outside step_ms)
            waits = [w for x in p.values() for w in x["wait"][max(warm - 1, 0):-1]]
            drain = [x["wait"][-1] for x in p.values()]
            sent = med([x["sent_per_round"] for x in p.values() if x["sent_per_round"]])
            per = " / ".join(f"{k} {x['tps']:.0f}" for k, x in sorted(p.items()))
            lost = [x["lost"] for x in p.values() if x["lost"] is not None]
            lost = f"; bulk connections lost per peer {min(lost)}–{max(lost)}" if lost else ""
            print(f"| {names[s]} | {lab} | **{tps:,.0f}** (sum of {per}) | {pct(tps, bound)} | {rms / tau / 1000:.2f} "
                  f"| median {med(waits):,.0f} ms, max {max(waits):,.0f} ms per round (paid in the timed rounds); final drain {min(drain) / 1000:.0f}–{max(drain) / 1000:.0f} s "
                  f"| {sent:,.1f} | rounds {p['p0']['rounds']} timed; view {p['p0']['view']}, averaged {p['p0']['averaged']}; wall {rc['wall_s']} s{lost} |")
            continue
        rows = [(t, j) for t, j in ts_rows(tag) if "step_ms" in j]
        if rc["rc"] or len(rows) < 3:
            print(f"| {names[s]} | {lab} | FAILED (rc {rc['rc']}) | | | | | |")
            continue
        if m == "co2":
            timed = [j for _, j in rows if j["step"] > warm * tau]
            tot = sum(j["step_ms"] for j in timed)
            tps = N * B * T * len(timed) / tot * 1000
            ex = sum(j.get("comm_exposed_ms", 0) for j in timed)
            ends = [round(j.get("comm_exposed_ms", 0)) for j in timed if j["step"] % tau == 0]
            print(f"| {names[s]} | {lab} | **{tps:,.0f}** | {pct(tps, bound)} | {tot / len(timed) / 1000:.2f} | {100 * ex / tot:.1f}% "
                  f"(round ends {ends} ms) | — | steps {timed[0]['step']}–{timed[-1]['step']} by step_ms; wall {rc['wall_s']} s |")
        else:
            tpst = N * B * T if m == "dp" else B * T * acc * ppdp
            a, b = 0, (len(rows) - 1 if m == "dp" else len(rows) - 3)
            dt = (rows[b][0] - rows[a][0]) / (rows[b][1]["step"] - rows[a][1]["step"])
            inside = [j for _, j in rows[a + 1:b + 1]]
            ex = sum(j.get("comm_exposed_ms", 0) for j in inside) / sum(j["step_ms"] for j in inside)
            print(f"| {names[s]} | {lab} | **{tpst / dt:,.0f}** | {pct(tpst / dt, bound)} | {dt:.2f} ({tpst} tok/step) | {100 * ex:.1f}% "
                  f"| — | wall clock, steps {rows[a][1]['step'] + 1}–{rows[b][1]['step']}; loom median step_ms "
                  f"{med(j['step_ms'] for j in inside) / 1000:.2f} s; wall {rc['wall_s']} s |")
print()

# churn
runs = [t for t in ("churn_none", "churn_kill") if rc_of(t)]
if runs:
    print("### Churn (byte model L4 H4 C256 V256 T128 B8, fortunes corpus)\n")
    print("| run | peers (finished) | swarm steps | tokens averaged (peer-rounds) | tok/s (wall) | steps recorded | final val loss | max wait_ms in training, final drain excluded (survivors / all) | rc |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tag in runs:
        rc = rc_of(tag)
        tokens, vals, wsurv, wall_all, fin, ids, last = 0, [], [], [], [], [], 0
        parts = {}  # round -> its average's participants, as the records that applied it say
        for f in sorted(glob.glob(f"{out}/{tag}/*.jsonl")):
            pid = os.path.basename(f)[:-6]
            ids.append(pid)
            rows, v = peer_rows(f)
            _, lv, txt = peer_log(f[:-6] + ".log")
            tokens += 8 * 128 * len(rows)  # the churn model: B 8 x T 128 per peer step
            for j in rows:
                parts[j["round"]] = max(parts.get(j["round"], 0), j["averaged"])
            last_r = max((j["round"] for j in rows), default=0)
            w = [j["wait_ms"] for j in rows if j["round"] < last_r or v is None]  # not the final drain
            wall_all += w
            if v is not None or lv is not None:
                fin.append(pid); vals.append(v if v is not None else lv); wsurv += w
            if rows:
                last = max(last, rows[-1]["step"])
        pr = sum(parts.values())
        avg_tokens = pr * tau * 8 * 128
        print(f"| {tag} | {', '.join(ids)} ({', '.join(fin)}) | {last} | {avg_tokens:,} ({pr}) | {avg_tokens / rc['wall_s']:,.0f} | {tokens // 1024:,} | "
              f"{'/'.join(f'{x:.4f}' for x in sorted(set(vals)))} | {max(wsurv, default=0):,.0f} / {max(wall_all, default=0):,.0f} ms | {rc['rc']} |")
    print("\ntokens averaged = the sum over rounds of the participants of each round's average (the records' "
          "\"averaged\") x tau x B x T: every peer's work that went into the model, including a killed peer's "
          "last round it contributed to, whose records it never wrote (a round's records are written when its "
          "average is applied, one round later). tok/s (wall) = tokens averaged / the run's wall time (start-up "
          "included). steps recorded = the metrics lines all peers wrote.\n")
conv = [t for t in ("conv_dp", "conv_co2") if rc_of(t)]
if conv:
    print("### Convergence at equal tokens (loopback MPI runs)\n")
    for tag in conv:
        v = [j["val_loss"] for _, j in ts_rows(tag) if "val_loss" in j]
        print(f"- {tag}: rc {rc_of(tag)['rc']}, final val loss {v[-1] if v else '?'}")
sw = [t for t in ("conv_swarm_none", "conv_swarm_int8", "conv_swarm_topk", "conv_swarm_topk2")
      if rc_of(t)]
if sw:
    dpv = [j["val_loss"] for _, j in ts_rows("conv_dp") if "val_loss" in j] if rc_of("conv_dp") else []
    print("\n### Convergence of the swarm by --outer-compress (same steps; 1 Gbit/s tbf)\n")
    print("| --outer-compress | final val loss (per peer) | vs sync DP | MiB sent per peer per round (median) | rc |")
    print("|---|---|---|---|---|")
    for tag in sw:
        vals, sent = [], []
        for f in sorted(glob.glob(f"{out}/{tag}/*.jsonl")):
            rows, v = peer_rows(f)
            _, lv, _ = peer_log(f[:-6] + ".log")
            if v is not None or lv is not None:
                vals.append(v if v is not None else lv)
            r = max((j["round"] for j in rows), default=0)
            mb = [j["sent_mb"] for j in rows if "sent_mb" in j]
            if mb and r:
                sent.append(mb[-1] / r)
        vs = f"{100 * (statistics.median(vals) / dpv[-1] - 1):+.1f}%" if vals and dpv else "—"
        print(f"| {tag[len('conv_swarm_'):]} | {'/'.join(f'{x:.4f}' for x in sorted(set(vals)))} | {vs} | "
              f"{statistics.median(sent) if sent else float('nan'):.2f} | {rc_of(tag)['rc']} |")
