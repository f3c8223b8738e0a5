#!/usr/bin/env python3
"""GGUFs of the reference checkpoints written by llama.cpp's own converter, to check that infokv reads what the
tool everyone uses writes (rope_freqs.weight for Llama 3.x scaling, qwen2's unpermuted q/k rows and biases).

Not run in CI (it needs torch and llama.cpp's sources). Steps:
  pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
  /work/venv-ref/v/bin/python packaging/tools/transformers_refs.py --infokv build/infokv \
      --out /tmp/refs.json --work /tmp/ikv-refs            # leaves the checkpoints in /tmp/ikv-refs
  /work/venv-ref/v/bin/python packaging/tools/convert_with_llamacpp.py \
      --llama-cpp llama_cpp_python-0.3.36/vendor/llama.cpp --work /tmp/ikv-refs --out /tmp/conv
  INFOKV_CONVERTED_GGUF_DIR=/tmp/conv build/tests/infokv_tests --gtest_filter='Transformers/*'

The synthetic vocabularies have no pre-tokeniser hash the converter knows, so its pre-tokeniser check is answered
here (llama-bpe for Llama 3, qwen2 for Qwen2, gpt2 otherwise); that choice only names the pre-tokeniser in the
GGUF and does not touch the weights. transformers 5 gives a Qwen2 tokenizer a pad token beyond the vocabulary, so
the copy's tokenizer_config.json names an existing one.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

CASES = {"llama-3.2-1b": "llama-bpe", "llama-3.2-3b": "llama-bpe", "qwen2.5-0.5b": "qwen2",
         "tinyllama-1.1b": "gpt2", "mistral-7b": "gpt2"}

RUNNER = r'''
import runpy, sys
root, pre, model, out = sys.argv[1:5]
sys.path.insert(0, root)
sys.path.insert(0, root + "/gguf-py")
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, "--outtype", "f32"]
runpy.run_path(root + "/convert_hf_to_gguf.py", run_name="__main__")
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (vendor/llama.cpp of llama-cpp-python)")
    ap.add_argument("--work", required=True, help="the checkpoints transformers_refs.py left (--work)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, pre in CASES.items():
        src = os.path.join(args.work, name)
        if not os.path.isdir(src):
            print(f"{name}: no checkpoint in {args.work}, skipped", file=sys.stderr)
            continue
        copy = os.path.join(args.out, name + ".src")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(src, copy)
        cfg_path = os.path.join(copy, "tokenizer_config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["pad_token"] = cfg.get("eos_token", "</s>")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        out = os.path.join(args.out, name + ".gguf")
        subprocess.run([sys.executable, "-c", RUNNER, os.path.abspath(args.llama_cpp), pre, copy, out], check=True,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(copy)
        print(f"{name}: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
