#!/usr/bin/env python3
"""offload_table.py RUNS.jsonl [RUNS.jsonl ...] — the markdown tables of bench/bench_offload.sh:
every run (step time, tokens/s, I/O wait, peak RSS, bytes moved, the planner's prediction and
its error, the CPU share other processes took), then swapped vs in-memory ratios by model and K.
offload_table.py --predict RUNS.jsonl: the predict section's pairs (pred_CONFIG_rR_plan and
_train), per configuration the medians over rounds of the step, the update pass and the rest of
the step, predicted and measured, and each round's step error."""
import json
import statistics
import sys


def load(paths):
    runs = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            runs[r["tag"]] = r  # a later file's run of the same tag wins
    return runs


def fmt(v, f="{:.1f}"):
    return "-" if v is None else f.format(v)


def main():
    runs = load(sys.argv[1:])
    print("| run | step s | tok/s | I/O wait s | peak RSS MiB | moved GiB/step | predicted s | "
          "error | foreign CPU | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tag, r in runs.items():
        pred, step = r.get("predicted_s"), r.get("step_s")
        err = f"{100 * (pred - step) / step:+.0f}%" if pred and step else "-"
        note = r.get("error", "")[:120] if r.get("rc") else ""
        print(f"| {tag} | {fmt(step, '{:.2f}')} | {fmt(r.get('tok_s'))} | "
              f"{fmt(r.get('io_wait_s'), '{:.2f}')} | {fmt(r.get('peak_rss_mib'))} | "
              f"{fmt(r.get('moved_gib'), '{:.2f}')} | {fmt(pred, '{:.2f}')} | {err} | "
              f"{fmt(r.get('foreign'), '{:.2f}')} | {note} |")
    print()
    print("| swapped run | in-memory run | swapped tok/s ÷ in-memory tok/s |")
    print("|---|---|---|")
    for tag, r in runs.items():
        if "_off_" not in tag or not r.get("tok_s"):
            continue
        model, rest = tag.split("_off_")
        k = rest.split("_")[-1] if rest.split("_")[-1].startswith("k") else ""
        mem = runs.get(f"{model}_mem_{k}" if k else f"{model}_mem")
        if mem and mem.get("tok_s"):
            print(f"| {tag} | {mem['tag']} | {r['tok_s'] / mem['tok_s']:.2f} |")


def predict(runs):
    cfgs = {}
    for tag, r in runs.items():
        if tag.startswith("pred_") and tag.endswith("_plan"):
            cfg, rnd = tag[5:-5].rsplit("_r", 1)
            t = runs.get(tag[:-5] + "_train")
            if t and t.get("step_s") and r.get("predicted_s") and not t.get("rc"):
                cfgs.setdefault(cfg, []).append((r, t))
    med = statistics.median
    print("| configuration | pairs | predicted s/step | measured s/step | error | update pass "
          "predicted / measured s | the rest predicted / measured s | each round's error | "
          "foreign CPU | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cfg, pairs in cfgs.items():
        p = med(r["predicted_s"] for r, _ in pairs)
        m = med(t["step_s"] for _, t in pairs)
        pu = med(r.get("predicted_update_s", 0) for r, _ in pairs)
        mu = med(t.get("update_s", 0) for _, t in pairs)
        errs = ", ".join(f"{100 * (r['predicted_s'] - t['step_s']) / t['step_s']:+.0f}%"
                         for r, t in pairs)
        fr = med(t.get("foreign", 0) for _, t in pairs)
        ld = med(t.get("load", 0) for _, t in pairs)
        print(f"| {cfg} | {len(pairs)} | {p:.2f} | {m:.2f} | {100 * (p - m) / m:+.0f}% | "
              f"{pu:.2f} / {mu:.2f} | {p - pu:.2f} / {m - mu:.2f} | {errs} | {fr:.2f} | {ld:.1f} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--predict"]:
        predict(load(sys.argv[2:]))
    else:
        main()
