#!/usr/bin/env python3
"""Generate with an InfoKV-compressed KV cache and print how many bytes the cache holds.

    INFOKV_MODELS_DIR=/path/to/models python3 generate_compressed.py [model.gguf]
"""
import os
import sys

import infokv

# TODO(snapshots): save the session to a snapshot, restore it into a fresh session and continue, once the C ABI
# has ikv_session_save/restore (they will reach this package through bindings/infokv.i without binding work).

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ["INFOKV_MODELS_DIR"], "stories260K", "stories260K.gguf")
prompt = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
          "One day, she saw a big, red ball. She wanted to play with it.")

with infokv.Model(path) as model, model.session(policy="infokv", budget=0.5) as session:
    full = len(model.tokenize(prompt))
    for token in session.generate(prompt, max_tokens=48, temperature=0):
        print(token.text, end="", flush=True)
    print()
    print(f"length: {session.length()}  kept per layer: {[session.kept(0, l) for l in range(model.n_layer)]}")
    print(f"kv_bytes before compression: {session.kv_bytes()}")
    session.compress()  # to the session's budget: half of the sequence
    print(f"kv_bytes after compression: {session.kv_bytes()}  (prompt was {full} tokens)")
    print("pool:", session.kv_stats())
