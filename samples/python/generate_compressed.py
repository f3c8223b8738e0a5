#!/usr/bin/env python3
"""Generate with an InfoKV-compressed KV cache (policy infokv, budget 0.5), save a snapshot, restore it into a new
session and continue generating; print the KV bytes and the snapshot's size.

    INFOKV_MODELS_DIR=/path/to/models python3 generate_compressed.py [model.gguf]
"""
import os
import sys
import tempfile

import infokv

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ["INFOKV_MODELS_DIR"], "stories260K", "stories260K.gguf")
prompt = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
          "One day, she saw a big, red ball. She wanted to play with it.")

# A config holds every setting (JSON here; config.to_binary() / Config.from_binary() work as well).
config = infokv.Config.from_dict({"model_path": path, "compression": {"policy": "infokv", "budget_fraction": 0.5},
                                  "sampler": {"temperature": 0}})
with config, infokv.Model.from_config(config) as model, model.session(config=config) as session:
    for token in session.generate(prompt, max_tokens=24, temperature=0):
        print(token.text, end="", flush=True)
    print()
    print(f"length: {session.length()}  kept per layer: {[session.kept(0, l) for l in range(model.n_layer)]}")
    print(f"kv_bytes before compression: {session.kv_bytes()}")
    session.compress()  # to the session's budget: half of the sequence
    print(f"kv_bytes after compression: {session.kv_bytes()}")

    # Snapshot: only the kept tokens are stored, so the compressed cache gives a small file.
    with tempfile.TemporaryDirectory() as tmp:
        snap = os.path.join(tmp, "session.ikvs")
        session.save(snap)
        info = infokv.inspect_snapshot(snap)
        print(f"snapshot bytes: {os.path.getsize(snap)}  (inspect: {len(info)} fields)")

        # Continue in this session and, from the snapshot, in a new one (the snapshot's policy, to continue exactly).
        expected = session.complete(None, 24, temperature=0).tokens
        with model.session(config=config) as restored:
            (seq,) = restored.restore(snap)
            print(f"restored sequence {seq}, kv_bytes: {restored.kv_bytes(seq)}")
            print("continued: ", end="")
            got = restored.complete(None, 24, seq=seq, temperature=0,
                                    on_token=lambda t: print(t.text, end="", flush=True)).tokens
            print()
    if got != expected:
        sys.exit(f"restored continuation differs: {got} vs {expected}")
    print(f"continuation matches the uninterrupted session: {len(got)} tokens")
