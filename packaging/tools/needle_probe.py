#!/usr/bin/env python3
"""Needle probe: a fact sentence ("The special magic number for X is: 1234567.") hidden at depths 6-94% of a
public-domain passage, the question at the end of the same user message (or, with --after, in the next turn after
the passage was compressed), greedy, through the Python binding's chat API. Prints one JSON line: how many cases
found the number, and per case (depth, found, answer, length, KV bytes, seconds).

Usage: PYTHONPATH=build/bindings/python python3 packaging/tools/needle_probe.py MODEL.gguf POLICY BUDGET
         [--context 2048] [--cases 5] [--text FILE] [--after]
POLICY is none or any policy name; BUDGET a fraction (0.25) or tokens (128). Default settings otherwise.
"""
import argparse
import json
import os
import random
import sys
import time

import infokv

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("policy")
ap.add_argument("budget")
ap.add_argument("--context", type=int, default=2048, help="about this many tokens of passage")
ap.add_argument("--cases", type=int, default=5)
ap.add_argument("--text", default=os.path.join(os.environ.get("INFOKV_CORPORA_DIR", "../shared/corpora"),
                                               "northangerabbey.txt"))
ap.add_argument("--after", action="store_true", help="ask in a new turn after the passage's turn")
ap.add_argument("--threads", type=int, default=0)
a = ap.parse_args()

budget = float(a.budget) if "." in a.budget else int(a.budget)
words = open(a.text, encoding="utf-8").read()[5000:].split(" ")
rng = random.Random(7)
keys = ["the lighthouse", "Mr. Tilney's carriage", "the old abbey", "the blue parlour", "Catherine's letter",
        "the Bath assembly", "the gothic chest", "the morning walk"]
found, res = 0, []
with infokv.Model.load(a.model) as model:
    for c in range(a.cases):
        depth = 0.06 + 0.88 * c / max(1, a.cases - 1)
        num = str(rng.randint(1000000, 9999999))
        key = keys[c % len(keys)]
        hay = " ".join(words[200 * c:200 * c + int(a.context * 0.72)])
        cut = int(len(hay) * depth)
        dot = hay.rfind(". ", 0, cut)
        cut = dot + 2 if dot > 0 else cut
        doc = hay[:cut] + f" The special magic number for {key} is: {num}. " + hay[cut:]
        q = f"What is the special magic number for {key} mentioned in the text? Answer with the number only."
        opts = dict(n_threads=a.threads)
        if a.policy != "none":
            opts.update(policy=a.policy, budget=budget)
        with model.session(**opts) as s:
            t = time.time()
            if a.after:
                s.chat([("user", "Read this text and remember it.\n\n" + doc)], 16, temperature=0)
                r = s.chat([("user", q)], 14, temperature=0)
            else:
                r = s.chat([("user", doc + "\n\n" + q)], 14, temperature=0)
            ok = num in r.text
            found += ok
            res.append([round(depth, 2), ok, r.text.strip()[:24], s.length(0), s.kv_bytes(0), round(time.time() - t, 1)])
print(json.dumps({"policy": a.policy, "budget": a.budget, "after": a.after, "found": found, "cases": a.cases,
                  "results": res}))
