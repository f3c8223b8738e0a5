#!/usr/bin/env python3
"""Run NVIDIA's kvpress on exactly the cases `infokv eval-retrieval --cases-out FILE` wrote, and put its presses
beside infokv's policies, case by case.

Same weights: the GGUF infokv ran is loaded by transformers (its GGUF loader dequantises every tensor to float32) and
saved once as a Hugging Face directory (--hf-dir), which KVzipPress needs to find the tokenizer. Same tokens: the
context ids and the question ids are taken from the cases file, not re-tokenised. Same protocol as kvpress's
pipeline (`KVPressTextGenerationPipeline._forward`): the context is prefilled under the press, then the question
(here: the new user turn, the generation prompt and the answer prefix) is appended at the context's original
positions and answered greedily without a press, stopping at an end-of-turn token or after max_answer tokens.
Scored as infokv scores: the fraction of the expected strings the answer contains.

What differs, by kvpress's design: its presses score per KV head and *mask* evicted entries (the memory is not
freed), where infokv frees whole blocks per layer; kvpress protects no span (infokv's default keeps the system turn
and the chat markup); `compression_ratio` is the fraction removed (1 - budget). KVzipPress replays the context
after "Repeat the previous context exactly." (one to two more passes over it).

Needs a venv with torch, kvpress and gguf (not the project's: kvpress pulls transformers 5 and NumPy 2):
    python3 -m venv /tmp/venv-kvpress && /tmp/venv-kvpress/bin/pip install torch==2.8.0 kvpress==0.5.5 gguf
Then:
    build/infokv eval-retrieval --model M.gguf ... --cases-out cases.jsonl
    /tmp/venv-kvpress/bin/python packaging/tools/kvpress_retrieval.py --gguf M.gguf --cases cases.jsonl \\
        --budgets 0.25,0.125 --presses snapkv,expected_attention,kvzip [--json out.json]
"""
import argparse
import json
import os
import sys
import time


def load(gguf, hf_dir, threads):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(threads)
    if not os.path.isdir(hf_dir) or not os.path.exists(os.path.join(hf_dir, "config.json")):
        d, f = os.path.split(os.path.abspath(gguf))
        print(f"kvpress_retrieval: converting {gguf} to {hf_dir} (dequantised to float32)", file=sys.stderr)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        tok.save_pretrained(hf_dir)
        model.save_pretrained(hf_dir)
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    return tok, model


def make_press(name, ratio):
    import kvpress as kp

    presses = {
        "snapkv": lambda: kp.SnapKVPress(compression_ratio=ratio),
        "expected_attention": lambda: kp.ExpectedAttentionPress(compression_ratio=ratio),
        "adakv_expected_attention": lambda: kp.AdaKVPress(kp.ExpectedAttentionPress(compression_ratio=ratio)),
        "kvzip": lambda: kp.KVzipPress(compression_ratio=ratio),
        "knorm": lambda: kp.KnormPress(compression_ratio=ratio),
        "keydiff": lambda: kp.KeyDiffPress(compression_ratio=ratio),
        "tova": lambda: kp.TOVAPress(compression_ratio=ratio),
        "streaming": lambda: kp.StreamingLLMPress(compression_ratio=ratio),
        "pyramidkv": lambda: kp.PyramidKVPress(compression_ratio=ratio),
    }
    if name not in presses:
        sys.exit(f"kvpress_retrieval: unknown press '{name}' (one of {', '.join(presses)})")
    return presses[name]()


def answer(model, tok, context_ids, after_ids, max_answer, press, stops):
    """kvpress's pipeline._forward and generate_answer on given ids: prefill under the press, then greedy."""
    import contextlib

    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    ctx = torch.tensor([context_ids])
    with torch.inference_mode():
        with press(model) if press is not None else contextlib.nullcontext():
            model.model(input_ids=ctx, past_key_values=cache)
        n = len(context_ids)
        q = torch.tensor([after_ids])
        pos = torch.arange(n, n + q.shape[1]).unsqueeze(0)
        out = model(input_ids=q, past_key_values=cache, position_ids=pos, logits_to_keep=1)
        pos = pos[:, -1:] + 1
        ids = [int(out.logits[0, -1].argmax())]
        for i in range(max_answer - 1):
            if ids[-1] in stops:
                break
            out = model(input_ids=torch.tensor([[ids[-1]]]), past_key_values=cache, position_ids=pos + i)
            ids.append(int(out.logits[0, -1].argmax()))
    return tok.decode(ids, skip_special_tokens=True)


def score(text, expected):
    return sum(1.0 for e in expected if e in text) / len(expected) if expected else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, help="the GGUF infokv ran (its weights, dequantised)")
    ap.add_argument("--cases", required=True, help="JSON lines from infokv eval-retrieval --cases-out")
    ap.add_argument("--hf-dir", default=None, help="where the converted model is kept (default: beside --cases)")
    ap.add_argument("--budgets", default="0.25,0.125", help="fractions kept (kvpress's compression_ratio = 1 - budget)")
    ap.add_argument("--presses", default="snapkv,expected_attention,adakv_expected_attention,kvzip,keydiff,knorm,tova,streaming")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-full", action="store_true", help="skip the uncompressed run")
    ap.add_argument("--json", default=None, help="write every answer and the summary here")
    a = ap.parse_args()

    cases = [json.loads(l) for l in open(a.cases) if l.strip()]
    if not cases:
        sys.exit(f"kvpress_retrieval: no cases in {a.cases}")
    hf_dir = a.hf_dir or os.path.join(os.path.dirname(os.path.abspath(a.cases)), "hf-" + os.path.basename(a.gguf))
    tok, model = load(a.gguf, hf_dir, a.threads)
    stops = set()
    for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"):
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != tok.unk_token_id and i is not None:
            stops.add(i)
    eos = model.generation_config.eos_token_id
    stops.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])

    budgets = [float(b) for b in a.budgets.split(",") if b]
    runs = ([("full", 1.0)] if not a.no_full else []) + [(p, b) for p in a.presses.split(",") if p for b in budgets]
    rows = {}  # (runtime, policy, budget) -> [score per case]
    per_case = []
    for ci, c in enumerate(cases):
        got = {}
        for name, b in runs:
            press = None if name == "full" else make_press(name, 1.0 - b)
            t0 = time.time()
            text = answer(model, tok, c["context_ids"], c["after_ids"], c["max_answer"], press, stops)
            s = score(text, c["expected"])
            key = name if name == "full" else f"{name}@{b:g}"
            got[key] = {"answer": text, "score": s, "seconds": time.time() - t0}
            rows.setdefault(("kvpress", name, b), []).append(s)
            print(f"case {ci + 1}/{len(cases)} {c['task']} {key}: {s:.2f} {text!r} ({time.time() - t0:.1f} s)",
                  file=sys.stderr, flush=True)
        for key, v in c.get("answers", {}).items():
            pol, _, b = key.partition("@")
            rows.setdefault(("infokv", pol, float(b) if b else 1.0), []).append(v["score"])
        per_case.append({"task": c["task"], "case": c["case"], "expected": c["expected"], "kvpress": got,
                         "infokv": c.get("answers", {})})

    summary = []
    print(f"{'runtime':8} {'policy':26} {'budget':>6} {'accuracy':>8} {'cases':>5}")
    for (rt, pol, b), v in sorted(rows.items(), key=lambda kv: (-kv[0][2], kv[0][0], kv[0][1])):
        acc = sum(v) / len(v)
        summary.append({"runtime": rt, "policy": pol, "budget": b, "accuracy": acc, "cases": len(v)})
        print(f"{rt:8} {pol:26} {b:6.3f} {acc:8.3f} {len(v):5d}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "cases": per_case}, f, indent=1)


if __name__ == "__main__":
    main()
