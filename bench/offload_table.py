#!/usr/bin/env python3
"""offload_table.py RUNS.jsonl [RUNS.jsonl ...] — the markdown tables of bench/bench_offload.sh:
every run (step time, tokens/s, I/O wait, peak RSS, bytes moved, the planner's prediction and
its error, the CPU share other processes took), then swapped vs in-memory ratios by model and K."""
import json
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


if __name__ == "__main__":
    main()
