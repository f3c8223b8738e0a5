#!/usr/bin/env python3
"""Writes a Hugging Face style LlamaForCausalLM or Qwen2ForCausalLM directory (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json) from a llama or qwen2 GGUF with a byte-level BPE vocabulary, undoing the
converter's q/k row permutation (llama; a qwen2 GGUF keeps Hugging Face's order) and keeping q/k/v biases, for end-to-end checks of infokv's safetensors loader (not run in CI). Weights are dequantised by the
gguf package and stored as F32, F16 or BF16 (--dtype); BF16 is stored by truncation-free rounding to nearest even.

  PYTHONPATH=/tmp/refpy python3 packaging/tools/gguf_to_hf.py IN.gguf OUT_DIR [--dtype F32] [--shards 2]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader, dequantize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tests', 'reference'))
import make_refs  # noqa: E402  (its hf_tokenizer builds the tokenizers.Tokenizer from the GGUF vocabulary)


def unpermute(w, n_head):
    # llama.cpp's permute: w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2); this is its inverse.
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def to_dtype(a, dtype):
    if dtype == 'F32':
        return a.astype(np.float32).tobytes()
    if dtype == 'F16':
        return a.astype(np.float16).tobytes()
    u = a.astype(np.float32).view(np.uint32)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u.tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        b = to_dtype(a, dtype)
        header[name] = {'dtype': dtype, 'shape': list(a.shape), 'data_offsets': [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('gguf')
    ap.add_argument('out')
    ap.add_argument('--dtype', default='F32', choices=['F32', 'F16', 'BF16'])
    ap.add_argument('--shards', type=int, default=1)
    a = ap.parse_args()
    r = GGUFReader(a.gguf)
    f = lambda k: r.fields[k].contents()
    arch = f('general.architecture')
    if arch not in ('llama', 'qwen2'):
        sys.exit('gguf_to_hf: architecture %s is neither llama nor qwen2' % arch)
    n_head, n_kv = int(f(arch + '.attention.head_count')), int(f(arch + '.attention.head_count_kv'))
    names = {'token_embd.weight': 'model.embed_tokens.weight', 'output_norm.weight': 'model.norm.weight',
             'output.weight': 'lm_head.weight'}
    sub = {'attn_norm': 'input_layernorm', 'attn_q': 'self_attn.q_proj', 'attn_k': 'self_attn.k_proj',
           'attn_v': 'self_attn.v_proj', 'attn_output': 'self_attn.o_proj', 'ffn_norm': 'post_attention_layernorm',
           'ffn_gate': 'mlp.gate_proj', 'ffn_up': 'mlp.up_proj', 'ffn_down': 'mlp.down_proj'}
    out = []
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        if t.name in names:
            name = names[t.name]
        else:
            _, l, kind, suffix = t.name.split('.')
            name = 'model.layers.%s.%s.%s' % (l, sub[kind], suffix)
            if arch == 'llama' and kind == 'attn_q':
                w = unpermute(w, n_head)
            elif arch == 'llama' and kind == 'attn_k':
                w = unpermute(w, n_kv)
        out.append((name, w))
    os.makedirs(a.out, exist_ok=True)
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, 'model.safetensors'), out, a.dtype)
    else:
        wm = {}
        per = (len(out) + a.shards - 1) // a.shards
        for s in range(a.shards):
            fn = 'model-%05d-of-%05d.safetensors' % (s + 1, a.shards)
            part = out[s * per:(s + 1) * per]
            write_safetensors(os.path.join(a.out, fn), part, a.dtype)
            wm.update({n: fn for n, _ in part})
        json.dump({'metadata': {}, 'weight_map': wm}, open(os.path.join(a.out, 'model.safetensors.index.json'), 'w'))
    cfg = {'architectures': ['LlamaForCausalLM' if arch == 'llama' else 'Qwen2ForCausalLM'], 'model_type': arch,
           'hidden_size': int(f(arch + '.embedding_length')), 'num_hidden_layers': int(f(arch + '.block_count')),
           'num_attention_heads': n_head, 'num_key_value_heads': n_kv,
           'intermediate_size': int(f(arch + '.feed_forward_length')),
           'max_position_embeddings': int(f(arch + '.context_length')),
           'rms_norm_eps': float(f(arch + '.attention.layer_norm_rms_epsilon')),
           'rope_theta': float(f(arch + '.rope.freq_base')), 'tie_word_embeddings': 'output.weight' not in [t.name for t in r.tensors],
           'vocab_size': len(f('tokenizer.ggml.tokens')), 'bos_token_id': int(f('tokenizer.ggml.bos_token_id')),
           'eos_token_id': int(f('tokenizer.ggml.eos_token_id'))}
    json.dump(cfg, open(os.path.join(a.out, 'config.json'), 'w'), indent=1)
    make_refs.hf_tokenizer(r, r.fields['tokenizer.ggml.pre'].contents()).save(os.path.join(a.out, 'tokenizer.json'))
    toks = f('tokenizer.ggml.tokens')
    tcfg = {'bos_token': toks[int(f('tokenizer.ggml.bos_token_id'))], 'eos_token': toks[int(f('tokenizer.ggml.eos_token_id'))],
            'add_bos_token': bool(f('tokenizer.ggml.add_bos_token')) if 'tokenizer.ggml.add_bos_token' in r.fields else False}
    if 'tokenizer.chat_template' in r.fields:
        tcfg['chat_template'] = f('tokenizer.chat_template')
    json.dump(tcfg, open(os.path.join(a.out, 'tokenizer_config.json'), 'w'), indent=1)
    print(a.out)


if __name__ == '__main__':
    main()
