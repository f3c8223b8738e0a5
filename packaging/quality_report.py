#!/usr/bin/env python3
"""Runs `infokv eval` over every corpus and prints the quality tables of packaging/docs/quality.md (markdown).

usage: python3 packaging/quality_report.py BIN MODEL CORPORA_DIR [--prefix 400 --continuation 100 --windows 8]
For each corpus: every policy at 50%, 25% and 12.5%; then auto against the best fixed policy of each corpus and
budget, chosen in hindsight (the lowest mean KL of the six fixed policies): mean KL ratio, windows auto wins, median
paired difference, and the bytes each held; then, per budget, the paired comparison of InfoKV with the best
attention-only baseline (SnapKV, H2O, TOVA, PyramidKV).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("model")
ap.add_argument("corpora")
ap.add_argument("--prefix", type=int, default=400)
ap.add_argument("--continuation", type=int, default=100)
ap.add_argument("--windows", type=int, default=8)
ap.add_argument("--offset", type=int, default=3000)
ap.add_argument("--budgets", default="0.5,0.25,0.125")
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--files", default="emma.txt,mansfieldpark.txt,northangerabbey.txt,prideandprejudice.txt,senseandsensibility.txt")
a = ap.parse_args()

policies = "auto,infokv,snapkv,h2o,streaming,tova,pyramidkv"
fixed = ["infokv", "snapkv", "h2o", "streaming", "tova", "pyramidkv"]
budgets = a.budgets
budget_list = [float(x) for x in budgets.split(",")]
auto_rows = []
attention_only = ["snapkv", "h2o", "tova", "pyramidkv"]
all_pairs = {}
for f in a.files.split(","):
    cmd = [a.bin, "eval", "--model", a.model, "--file", os.path.join(a.corpora, f), "--prefix", str(a.prefix),
           "--continuation", str(a.continuation), "--windows", str(a.windows), "--offset", str(a.offset),
           "--policies", policies, "--budgets", budgets, "--json"] + (["--threads", str(a.threads)] if a.threads else [])
    rows = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    print(f"\n**{f}** (prefix {a.prefix}, continuation {a.continuation}, {a.windows} windows)\n")
    print("| policy | budget | ppl | KL mean | KL median | top-1 | KV bytes | of full |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['policy']} | {r['budget']*100:.1f}% | {r['ppl']:.3f} | {r['kl']:.5f} | {r['kl_median']:.5f} | "
              f"{r['top1']:.3f} | {r['kv_bytes']} | {100.0*r['kv_bytes']/r['kv_bytes_full']:.1f}% |")
    for b in budget_list:
        by = {r["policy"]: r for r in rows if abs(r["budget"] - b) < 1e-9}
        hind = min(fixed, key=lambda p: by[p]["kl"])
        d = [x - y for x, y in zip(by["auto"]["kl_per_window"], by[hind]["kl_per_window"])]
        auto_rows.append((f, b, hind, by[hind]["kl"], by["auto"]["kl"], sum(1 for x in d if x < 0), len(d),
                          statistics.median(d), by["auto"]["kv_bytes"], by[hind]["kv_bytes"]))
        best = min(attention_only, key=lambda p: by[p]["kl"])
        all_pairs.setdefault(b, []).extend(
            (x - y, best) for x, y in zip(by["infokv"]["kl_per_window"], by[best]["kl_per_window"]))

print("\n**auto against the best fixed policy of each corpus and budget, chosen in hindsight (paired per window)**\n")
print("| corpus | budget | best fixed | its KL | auto KL | ratio | auto wins | median KL difference | auto bytes | its bytes |")
print("|---|---|---|---|---|---|---|---|---|---|")
for f, b, hind, kh, ka, wins, n, med, ba, bh in auto_rows:
    print(f"| {f} | {b*100:.1f}% | {hind} | {kh:.5f} | {ka:.5f} | {ka/kh:.3f} | {wins}/{n} | {med:+.5f} | {ba} | {bh} |")

print("\n**InfoKV against the best attention-only baseline of each corpus (paired per window, all corpora)**\n")
print("| budget | windows | InfoKV wins | median KL difference | mean KL difference |")
print("|---|---|---|---|---|")
for b, pairs in sorted(all_pairs.items(), reverse=True):
    d = [x for x, _ in pairs]
    wins = sum(1 for x in d if x < 0)
    print(f"| {b*100:.1f}% | {len(d)} | {wins} | {statistics.median(d):+.5f} | {statistics.mean(d):+.5f} |")
