#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for the Llama-family architectures infokv runs.

Not run in CI (it needs torch); its output is committed as tests/data/transformers_refs.json and read by
tests/unit/model/test_model_families.cpp, which rebuilds the same checkpoints with `infokv synth` (the weights are a pure
function of preset, dtype and seed) and compares its logits with these.

Set-up (a venv outside the repository; about 5.5 GB with torch's CUDA wheels, only the CPU is used):
  python3 -m venv /work/venv-ref/v && /work/venv-ref/v/bin/pip install torch transformers safetensors numpy
  /work/venv-ref/v/bin/python packaging/tools/transformers_refs.py --infokv build/infokv \
      --out tests/data/transformers_refs.json --tf-made-dir tests/data/tf_made [--work /tmp/ikv-refs] \
      --real qwen2.5-coder-0.5b=$(packaging/fetch_models.sh --model qwen2.5-coder-0.5b | tail -n 1)
  (gguf_to_hf.py needs the gguf package: PYTHONPATH=<llama.cpp>/gguf-py, or pip install gguf)

For each case: `infokv synth --preset P --layers N --dtype D --format safetensors` writes a checkpoint; the case may
patch its config.json (kept whole in the output; RoPE scaling variants, a shorter max_position_embeddings so that a few hundred tokens run past
the original context); transformers loads it in float32 with eager attention (the f16/bf16 weights of a checkpoint
widen exactly), runs the case's token ids (drawn from a seeded generator) in one forward pass, and the script keeps,
at each probed position, the top-16 logits and the logits of 32 fixed random ids.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

# name, preset, layers, dtype, tokens, config patch (merged into config.json), probed positions (negative: from end)
CASES = [
    ("llama-3.2-1b", "llama-3.2-1b", 2, "f16", 40, None, [0, 7, -2, -1]),
    ("llama-3.2-3b", "llama-3.2-3b", 1, "bf16", 24, None, [0, -1]),
    ("qwen2.5-0.5b", "qwen2.5-0.5b", 2, "f16", 40, None, [0, 7, -2, -1]),
    ("tinyllama-1.1b", "tinyllama-1.1b", 2, "f16", 40, None, [0, -1]),
    ("mistral-7b", "mistral-7b", 1, "bf16", 24, None, [0, -1]),
    # RoPE scaling at SmolLM2's widths (head size 64), 600 tokens: well past the original context each patch declares.
    ("rope-llama3-long", "smollm2-135m", 2, "f32", 600,
     {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 64}}, [0, 63, 64, 300, -1]),
    ("rope-linear-long", "smollm2-135m", 2, "f32", 600,
     {"rope_scaling": {"rope_type": "linear", "factor": 4.0}, "max_position_embeddings": 128}, [0, 127, 300, -1]),
    ("rope-dynamic-long", "smollm2-135m", 2, "f32", 600,
     {"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}, "max_position_embeddings": 128}, [0, 127, 300, -1]),
    ("rope-theta-long", "smollm2-135m", 2, "f32", 600, {"rope_theta": 500000.0}, [0, 300, -1]),
]
# Checkpoints made by transformers itself (save_pretrained of a randomly initialised model: transformers 5's
# config.json with rope_parameters, no tokenizer), small enough to commit under tests/data/tf_made/. Norm weights,
# biases and q/k scales are randomised after init (transformers initialises norms to 1 and biases to 0, which would
# leave those paths untested, and with std-0.02 q/k weights attention is nearly uniform, hiding RoPE).
TF_MADE = [
    ("tf-llama3", "llama", dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                                tie_word_embeddings=True,
                                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 64}), 300, [0, 63, 64, 200, -1]),
    ("tf-qwen2", "qwen2", dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                               tie_word_embeddings=False), 300, [0, 100, -1]),
]
# Real published weights of a family (fetched by packaging/fetch_models.sh --model NAME): the GGUF is dequantised
# to an F32 checkpoint by packaging/tools/gguf_to_hf.py (the gguf package's dequantisers), which transformers runs;
# infokv runs the GGUF itself (its quantised rows expanded on the fly, activations in f32), so both compute with the
# same weight values.
REAL_TEXT = ("<|im_start|>user\nWrite a Python function that checks whether a string is a palindrome, ignoring case "
             "and punctuation.<|im_end|>\n<|im_start|>assistant\nHere is a function:\n\n```python\ndef is_palindrome(s):")
SEED = 1234
TOP = 16
FIXED = 32


def synth(infokv, preset, layers, dtype, out):
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([infokv, "synth", "--preset", preset, "--layers", str(layers), "--dtype", dtype,
                        "--format", "safetensors", "--seed", str(SEED), "--out", out, "--quiet"], check=True)


def patch_config(path, patch):
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(patch)
    with open(path, "w") as f:
        json.dump(cfg, f)


def make_tf_model(kind, cfg_args, out):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(SEED)
    model = (LlamaForCausalLM(LlamaConfig(**cfg_args)) if kind == "llama" else
             Qwen2ForCausalLM(Qwen2Config(**cfg_args)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(8.0)
    model.save_pretrained(out)
    return model


def probe(model, ids, probes, rng):
    vocab = model.config.vocab_size
    fixed = sorted(rng.choice(vocab, size=min(FIXED, vocab), replace=False).tolist())
    n_tok = len(ids)
    pos = sorted({p % n_tok for p in probes})
    with torch.no_grad():
        hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        logits = model.lm_head(hidden[pos]).double().numpy()
    rows = []
    for p, row in zip(pos, logits):
        top = np.argsort(-row, kind="stable")[:TOP]
        rows.append({"position": p, "top_ids": top.tolist(), "top_logits": [float(row[i]) for i in top],
                     "fixed_logits": [float(row[i]) for i in fixed], "std": float(row.std())})
    return fixed, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--infokv", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/ikv-refs")
    ap.add_argument("--only", default="")
    ap.add_argument("--real", action="append", default=[], metavar="NAME=GGUF",
                    help="a real GGUF to compare (e.g. qwen2.5-coder-0.5b=~/.cache/infokv/models/...gguf)")
    ap.add_argument("--tf-made-dir", default="", help="where to save the transformers-made checkpoints "
                    "(tests/data/tf_made)")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    results = []
    for name, preset, layers, dtype, n_tok, patch, probes in CASES:
        if args.only and name not in args.only.split(","):
            continue
        d = os.path.join(args.work, name)
        synth(args.infokv, preset, layers, dtype, d)
        if patch:
            patch_config(os.path.join(d, "config.json"), patch)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        vocab = model.config.vocab_size
        rng = np.random.default_rng(SEED + len(name))
        ids = rng.integers(3, vocab, size=n_tok).tolist()
        fixed, rows = probe(model, ids, probes, rng)
        with open(os.path.join(d, "config.json")) as f:
            config_text = f.read()
        results.append({"name": name, "preset": preset, "layers": layers, "dtype": dtype, "seed": SEED,
                        "config_json": config_text if patch else None, "ids": ids, "fixed_ids": fixed,
                        "probes": rows})
        print(f"{name}: {n_tok} tokens, logits std {rows[-1]['std']:.4f}", file=sys.stderr)
        del model
    for name, kind, cfg_args, n_tok, probes in TF_MADE:
        if args.only and name not in args.only.split(","):
            continue
        if not args.tf_made_dir:
            continue
        d = os.path.join(args.tf_made_dir, name)
        model = make_tf_model(kind, cfg_args, d)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        rng = np.random.default_rng(SEED + len(name))
        ids = rng.integers(0, model.config.vocab_size, size=n_tok).tolist()
        fixed, rows = probe(model, ids, probes, rng)
        results.append({"name": name, "dir": "tf_made/" + name, "ids": ids, "fixed_ids": fixed, "probes": rows})
        print(f"{name}: {n_tok} tokens, logits std {rows[-1]['std']:.4f}", file=sys.stderr)
    for spec in args.real:
        name, gguf_path = spec.split("=", 1)
        d = os.path.join(args.work, "real-" + name)
        if not os.path.exists(os.path.join(d, "config.json")):
            here = os.path.dirname(os.path.abspath(__file__))
            subprocess.run([sys.executable, os.path.join(here, "gguf_to_hf.py"), os.path.expanduser(gguf_path), d],
                           check=True, stdout=subprocess.DEVNULL)
        from tokenizers import Tokenizer
        ids = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode(REAL_TEXT).ids
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        rng = np.random.default_rng(SEED + len(name))
        fixed, rows = probe(model, ids, [0, len(ids) // 2, -2, -1], rng)
        results.append({"name": "real-" + name, "real_model": name, "text": REAL_TEXT, "ids": ids,
                        "fixed_ids": fixed, "probes": rows})
        print(f"real-{name}: {len(ids)} tokens, logits std {rows[-1]['std']:.4f}, top-1 at the end "
              f"{rows[-1]['top_ids'][0]}", file=sys.stderr)
        del model
    import transformers
    with open(args.out, "w") as f:
        json.dump({"generator": "packaging/tools/transformers_refs.py", "transformers": transformers.__version__,
                   "torch": torch.__version__, "cases": results}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
