#!/usr/bin/env python3
"""Compare infokv's logits with a reference built from the same GGUF weights.

Reference: Hugging Face transformers' LlamaForCausalLM (on CUDA when torch sees a GPU, else CPU) when torch and
transformers import; otherwise a NumPy forward pass written with transformers' conventions (rotate-half RoPE on
un-permuted Q/K weights), which checks the same weight mapping without torch.

infokv side: the C library through ctypes, KV cache in f32, on --device (default "cpu"; "cuda" runs the same
session on the GPU, whose weights are resident in 16 bits).

usage: compare_transformers.py --lib build/libinfokv.so --model FILE.gguf [--tokens 24] [--seed 0] [--device cuda]
Exit status 0 when the logits agree, 1 otherwise: on the CPU max |diff| / std(logits) < 1e-3 and top-1 agreement
100%; on CUDA (f32 checkpoints rounded to f16 there) max |diff| / std < 3e-2 and top-1 agreement >= 90%.
"""
import argparse
import ctypes
import struct
import sys

import numpy as np

GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


def read_gguf(path):
    """Minimal GGUF v2/v3 reader: metadata dict and name -> numpy array (row-major, HF [out, in] for matrices)."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = bytes(buf[off:off + n]).decode("utf-8", "replace")
        off += n
        return s

    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scal:
            return take(scal[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError("bad GGUF value type %d" % t)

    assert bytes(buf[:4]) == b"GGUF", "not a GGUF file"
    off = 4
    take("I")
    n_t, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    data0 = (off + align - 1) // align * align
    tensors = {}
    for name, ne, t, o in infos:
        n = int(np.prod(ne))
        shape = tuple(reversed(ne))
        if t == GGML_F32:
            a = np.frombuffer(buf, np.float32, n, data0 + o)
        elif t == GGML_F16:
            a = np.frombuffer(buf, np.float16, n, data0 + o).astype(np.float32)
        elif t == GGML_BF16:
            a = (np.frombuffer(buf, np.uint16, n, data0 + o).astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("tensor %s has type %d (only F32/F16/BF16 here)" % (name, t))
        tensors[name] = np.array(a, dtype=np.float32).reshape(shape)
    return meta, tensors


def unpermute(w, n_head):
    """GGUF (adjacent-pair RoPE) Q/K rows back to transformers' rotate-half order (inverse of llama.cpp's permute)."""
    out, d = w.shape
    hd = out // n_head
    return w.reshape(n_head, hd // 2, 2, d).swapaxes(1, 2).reshape(out, d)


def hf_weights(meta, t):
    a = "llama."
    nh, nkv = meta[a + "attention.head_count"], meta.get(a + "attention.head_count_kv", meta[a + "attention.head_count"])
    sd = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"]}
    sd["lm_head.weight"] = t.get("output.weight", t["token_embd.weight"])
    for l in range(meta[a + "block_count"]):
        p, q = "blk.%d." % l, "model.layers.%d." % l
        sd[q + "input_layernorm.weight"] = t[p + "attn_norm.weight"]
        sd[q + "self_attn.q_proj.weight"] = unpermute(t[p + "attn_q.weight"], nh)
        sd[q + "self_attn.k_proj.weight"] = unpermute(t[p + "attn_k.weight"], nkv)
        sd[q + "self_attn.v_proj.weight"] = t[p + "attn_v.weight"]
        sd[q + "self_attn.o_proj.weight"] = t[p + "attn_output.weight"]
        sd[q + "post_attention_layernorm.weight"] = t[p + "ffn_norm.weight"]
        sd[q + "mlp.gate_proj.weight"] = t[p + "ffn_gate.weight"]
        sd[q + "mlp.up_proj.weight"] = t[p + "ffn_up.weight"]
        sd[q + "mlp.down_proj.weight"] = t[p + "ffn_down.weight"]
    return sd


def numpy_reference(meta, sd, ids):
    a = "llama."
    d, L = meta[a + "embedding_length"], meta[a + "block_count"]
    nh = meta[a + "attention.head_count"]
    nkv = meta.get(a + "attention.head_count_kv", nh)
    hd, eps = d // nh, meta.get(a + "attention.layer_norm_rms_epsilon", 1e-5)
    theta = meta.get(a + "rope.freq_base", 10000.0)
    T = len(ids)
    x = sd["model.embed_tokens.weight"][ids].astype(np.float64)

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(v):  # v [T, H, hd], rotate-half
        h = hd // 2
        rot = np.concatenate([-v[..., h:], v[..., :h]], -1)
        return v * cos[:, None, :] + rot * sin[:, None, :]

    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = "model.layers.%d." % l
        xn = rms(x, sd[p + "input_layernorm.weight"])
        q = rope((xn @ sd[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd))
        k = rope((xn @ sd[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd))
        v = (xn @ sd[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd)
        x = x + o @ sd[p + "self_attn.o_proj.weight"].T
        xn = rms(x, sd[p + "post_attention_layernorm.weight"])
        g, u = xn @ sd[p + "mlp.gate_proj.weight"].T, xn @ sd[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ sd[p + "mlp.down_proj.weight"].T
    return (rms(x, sd["model.norm.weight"]) @ sd["lm_head.weight"].T).astype(np.float32)


def transformers_reference(meta, sd, ids):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    a = "llama."
    nh = meta[a + "attention.head_count"]
    cfg = LlamaConfig(
        vocab_size=sd["model.embed_tokens.weight"].shape[0], hidden_size=meta[a + "embedding_length"],
        intermediate_size=meta[a + "feed_forward_length"], num_hidden_layers=meta[a + "block_count"],
        num_attention_heads=nh, num_key_value_heads=meta.get(a + "attention.head_count_kv", nh),
        rms_norm_eps=meta.get(a + "attention.layer_norm_rms_epsilon", 1e-5), rope_theta=meta.get(a + "rope.freq_base", 10000.0),
        max_position_embeddings=max(len(ids), meta.get(a + "context_length", 2048)),
        tie_word_embeddings="output.weight" not in sd, attention_bias=False, mlp_bias=False)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        m = LlamaForCausalLM(cfg).to(torch.float32)
        m.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
        m = m.to(dev).eval()
        out = m(torch.tensor([ids], device=dev)).logits[0].float().cpu().numpy()
    return out, "transformers %s LlamaForCausalLM on %s" % (__import__("transformers").__version__, dev)


def infokv_logits(lib_path, model, ids, device="cpu"):
    lib = ctypes.CDLL(lib_path)
    i32, vp = ctypes.c_int32, ctypes.c_void_p
    lib.ikv_model_load.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
    lib.ikv_session_options_init_version.argtypes = [vp, ctypes.c_size_t, ctypes.c_uint32]
    lib.ikv_session_create.argtypes = [ctypes.POINTER(vp), vp, vp]
    lib.ikv_decode.argtypes = [vp, i32, ctypes.POINTER(i32), ctypes.c_size_t]
    lib.ikv_get_logits.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), vp, i32]
    lib.ikv_last_error_message.restype = ctypes.c_char_p
    m, s = vp(), vp()

    def ok(st, what):
        if st != 0:
            raise RuntimeError("%s: status %d: %s" % (what, st, lib.ikv_last_error_message().decode()))

    ok(lib.ikv_model_load(ctypes.byref(m), model.encode()), "ikv_model_load")
    opts = ctypes.create_string_buffer(512)
    # revision 2 (kv_dtype ... device) into a buffer larger than any revision: the later fields keep their defaults
    ok(lib.ikv_session_options_init_version(opts, len(opts), 2), "ikv_session_options_init_version")
    struct.pack_into("<i", opts, 12, 1)  # kv_dtype = IKV_KV_F32 (offset after struct_size, version, n_threads)
    # device (version 2): a pointer at offsetof(ikv_session_options, device), 104 on a 64-bit platform (the fields of
    # version 1 end at 100, padded to 8). Later versions append after it (version 3: max_sequences, left at 0).
    device_offset = 104
    _, version = struct.unpack_from("<II", opts, 0)
    if version < 2 and device != "cpu":
        raise RuntimeError("this libinfokv's session options have no device field (version %d)" % version)
    dev = ctypes.create_string_buffer(device.encode())
    if version >= 2:
        struct.pack_into("<Q", opts, device_offset, ctypes.addressof(dev))
    ok(lib.ikv_session_create(ctypes.byref(s), m, opts), "ikv_session_create")
    rows = []
    n = ctypes.c_size_t()
    lib.ikv_get_logits(None, 0, ctypes.byref(n), s, 0)
    for tok in ids:
        arr = (i32 * 1)(tok)
        ok(lib.ikv_decode(s, 0, arr, 1), "ikv_decode")
        out = (ctypes.c_float * 1)()
        lib.ikv_get_logits(out, 0, ctypes.byref(n), s, 0)  # size query
        buf = (ctypes.c_float * n.value)()
        ok(lib.ikv_get_logits(buf, n.value, ctypes.byref(n), s, 0), "ikv_get_logits")
        rows.append(np.frombuffer(buf, np.float32).copy())
    return np.stack(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", choices=["auto", "numpy", "transformers"], default="auto")
    ap.add_argument("--device", default="cpu", help="infokv device: cpu, cuda, cuda:N")
    args = ap.parse_args()
    meta, t = read_gguf(args.model)
    sd = hf_weights(meta, t)
    V = sd["model.embed_tokens.weight"].shape[0]
    rng = np.random.default_rng(args.seed)
    ids = [1] + [int(x) for x in rng.integers(3, V, args.tokens - 1)]
    ref = None
    if args.reference in ("auto", "transformers"):
        try:
            ref, name = transformers_reference(meta, sd, ids)
        except ImportError as e:
            if args.reference == "transformers":
                print("transformers/torch not importable: %s" % e)
                return 1
    if ref is None:
        ref, name = numpy_reference(meta, sd, ids), "NumPy reference (transformers conventions; torch not installed)"
    got = infokv_logits(args.lib, args.model, ids, args.device)
    scale = float(ref.std())
    err = np.abs(got - ref).max() / scale
    top1 = float((got.argmax(-1) == ref.argmax(-1)).mean())
    print("%s vs infokv (%s, f32 KV) on %s: %d positions, max|diff|/std = %.2e, top-1 agreement %.1f%%"
          % (name, args.device, meta.get("general.name", args.model), len(ids), err, 100 * top1))
    if args.device == "cpu":
        return 0 if err < 1e-3 and top1 == 1.0 else 1
    return 0 if err < 3e-2 and top1 >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
