#!/usr/bin/env python3
"""Reference values for the model-breadth tests, from implementations nobody here wrote (kept in the repository,
not run in CI; its outputs are committed under tests/data/).

  pip install --target /tmp/refpy gguf tokenizers      # gguf 0.19.0, tokenizers 0.23.3, numpy 2.x were used
  PYTHONPATH=/tmp/refpy python3 tests/reference/make_refs.py --smollm2 PATH/SmolLM2-135M-Instruct.Q4_1.gguf \
      --corpora ../shared/corpora

Writes
  tests/data/dequant_refs.bin       blocks of every supported quantised type and the gguf package's dequantisation
                                    (records: u32 type, u32 n_elements, u32 n_bytes, bytes, f32[n_elements]).
  tests/data/bpe_smollm2_refs.txt   Hugging Face `tokenizers` ids for corpus lines and edge cases, with the SmolLM2
  tests/data/bpe_llama3pre_refs.txt vocabulary and merges read from the GGUF, under SmolLM2's pre-tokeniser
                                    (Digits + ByteLevel, as its tokenizer.json) and under Llama 3's (Split regex +
                                    ByteLevel, ignore_merges). Lines: hex(input bytes) TAB ids separated by spaces.
  tests/data/smollm2_logits_refs.txt  a float64 numpy forward pass (written here, independent of the C++ one) on
                                    weights dequantised by the gguf package: per prompt, its ids, the top-64 logits
                                    of the last position, and a 16-token greedy continuation.
"""
import argparse
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as QT, dequantize, quantize
from tokenizers import Tokenizer, AddedToken, Regex, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, '..', 'data')

BLOCK = {QT.Q4_0: (32, 18), QT.Q4_1: (32, 20), QT.Q5_0: (32, 22), QT.Q5_1: (32, 24), QT.Q8_0: (32, 34),
         QT.Q4_K: (256, 144), QT.Q5_K: (256, 176), QT.Q6_K: (256, 210)}
# Byte offsets of the f16 fields of each block (kept finite when blocks are random).
F16_FIELDS = {QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
              QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208]}


def dequant_refs(reader, path):
    rng = np.random.default_rng(1234)
    out = bytearray()
    for qt, (qk, bb) in BLOCK.items():
        nblk = 24
        raw = rng.integers(0, 256, size=(nblk, bb), dtype=np.uint8)
        for off in F16_FIELDS[qt]:
            vals = (rng.standard_normal(nblk) * 0.05).astype(np.float16)
            raw[:, off:off + 2] = vals.view(np.uint8).reshape(nblk, 2)
        blocks = [raw.reshape(-1)]
        # blocks that the gguf package's quantiser made from real-valued data, where it has one
        try:
            q = quantize((rng.standard_normal((4, qk)) * 2).astype(np.float32), qt)
            blocks.append(np.asarray(q, dtype=np.uint8).reshape(-1))
        except NotImplementedError:
            pass
        # blocks of a real model, when it has this type
        for t in reader.tensors if reader is not None else []:
            if t.tensor_type == qt:
                blocks.append(np.asarray(t.data, dtype=np.uint8).reshape(-1)[: 8 * bb])
                break
        data = np.concatenate(blocks)
        n = data.size // bb * qk
        vals = dequantize(data.reshape(-1, bb), qt).astype(np.float32).reshape(-1)
        assert vals.size == n
        out += struct.pack('<III', int(qt), n, data.size) + data.tobytes() + vals.tobytes()
        print('dequant', qt.name, n, 'values')
    with open(path, 'wb') as f:
        f.write(out)


def field(reader, key):
    return reader.fields[key].contents()


def hf_tokenizer(reader, pre):
    tokens = field(reader, 'tokenizer.ggml.tokens')
    types = field(reader, 'tokenizer.ggml.token_type')
    merges = [tuple(m.split(' ', 1)) for m in field(reader, 'tokenizer.ggml.merges')]
    vocab = {t: i for i, t in enumerate(tokens)}
    if pre == 'smollm':
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre == 'qwen2':  # Qwen2's tokenizer.json: Llama 3's regex with single digits, merges never skipped, NFC
        from tokenizers import normalizers
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior='isolated', invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:  # Llama 3's tokenizer.json
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior='isolated', invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] in (3, 4)])
    return tok


EDGE = [
    '', ' ', '  ', '   x', 'x   ', '\n', '\n\n\n', '\t\tfoo', 'a  \n  b', ' \r\n ', 'a\r\nb', '  \n\n  x',
    'Hello world', ' Hello world', 'HELLO World hello',
    '12345678901234567890', '3.14159', '1,000,000', 'x1y22z333', '\u0663\u0664\u0665', '\u00bd \u2153 \u216b',
    '\U0001F600\U0001F44D\U0001F3FD\U0001F468\u200d\U0001F469\u200d\U0001F467', '\U0001F1EB\U0001F1F7', 'Hello \U0001F30D!',
    '\u4f60\u597d\uff0c\u4e16\u754c', '\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5', 'na\u00efve caf\u00e9', 'e\u0301',
    "I'm, you're, they've, we'll, he'd, it's, DON'T, I'M, She'S", "'s'", "''", "rock'n'roll",
    '<|im_start|>user\nHi<|im_end|>\n', '<|endoftext|><|endoftext|>', 'a<|im_start|>b', '<|im_start', '<|im_end|> x',
    'Hello!!! ...?? (test) [x] {y} @#$%^&*', 'foo--bar', 'e-mail: a.b@c.com', 'http://x.y/z?q=1&r=2',
    '\x00\x01\x7f', '\u00a0nbsp', 'a\u3000b', 'a\u2028b', 'def f(x):\n    return x**2\n', '    indented\n\tand tab',
    '!!!\n\n', 'a \n', 'x\u00a0 y', '\u200bzero width',
]


def corpus_cases(corpora):
    cases = []
    for name in ('prideandprejudice.txt', 'emma.txt', 'senseandsensibility.txt', 'mansfieldpark.txt',
                 'northangerabbey.txt', 'sample_story.txt'):
        p = os.path.join(corpora, name)
        if not os.path.exists(p):
            continue
        text = open(p, encoding='utf-8').read()
        lines = text.split('\n')
        step = max(1, len(lines) // 60)
        cases += [l for l in lines[::step] if l][:60]
        cases.append(text[1000:9000])  # a multi-line chunk with paragraph breaks
    return cases


def fuzz_cases(n=1000):
    """Short random strings over an alphabet chosen to stress the pre-tokenisers' corner cases."""
    import random
    alpha = list("aAbZz09 5  \t\n\r'.,!?-_()\"") + [
        "'s", "'T", "'re", "'LL", "\u00a0", "\u3000", "\u2028", "\u00e9", "\u00df", "\u216b", "\u00bd", "\u0663",
        "\u4e2d", "\u6587", "\U0001F600", "\U0001F44D\U0001F3FD", "\u200d", "\u0301", "\u01c5", "\x0b", "\x0c",
        "\x85", "\u1680", "<|im_start|>", "<|im_end|>", "\u0120", "\x00", "\x1f"]
    rng = random.Random(5)
    return [''.join(rng.choice(alpha) for _ in range(rng.randint(1, 25))) for _ in range(n)]


def tokenizer_refs(reader, corpora):
    cases = EDGE + corpus_cases(corpora) + fuzz_cases()
    for pre, name in (('smollm', 'bpe_smollm2_refs.txt'), ('llama3', 'bpe_llama3pre_refs.txt')):
        tok = hf_tokenizer(reader, pre)
        with open(os.path.join(DATA, name), 'w') as f:
            f.write('# %s pre-tokeniser, SmolLM2 vocabulary; tokenizers %s; hex(utf8) TAB ids\n' % (pre, 'HF'))
            for c in cases:
                ids = tok.encode(c).ids
                f.write(c.encode('utf-8').hex() + '\t' + ' '.join(map(str, ids)) + '\n')
        print('tokenizer', pre, len(cases), 'cases')


def weights(reader):
    w = {}
    for t in reader.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        shape = [int(x) for x in reversed(t.shape)]
        w[t.name] = a.reshape(shape)
    return w


def forward(w, hp, ids):
    n_layer, n_head, n_kv, eps, theta = hp
    emb = w['token_embd.weight']
    x = emb[ids]
    T, d = x.shape
    hd = d // n_head
    pos = np.arange(T)[:, None]
    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = pos * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rms(v, g):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * g

    def rope(v):  # v[T, H, hd], adjacent pairs (GGUF "llama" layout)
        a, b = v[..., 0::2], v[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        out = np.empty_like(v)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(n_layer):
        p = 'blk.%d.' % l
        h = rms(x, w[p + 'attn_norm.weight'])
        q = rope((h @ w[p + 'attn_q.weight'].T).reshape(T, n_head, hd))
        k = rope((h @ w[p + 'attn_k.weight'].T).reshape(T, n_kv, hd))
        v = (h @ w[p + 'attn_v.weight'].T).reshape(T, n_kv, hd)
        o = np.empty((T, n_head, hd))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            o[:, hh, :] = s @ v[:, kv, :]
        x = x + o.reshape(T, d) @ w[p + 'attn_output.weight'].T
        h = rms(x, w[p + 'ffn_norm.weight'])
        g = h @ w[p + 'ffn_gate.weight'].T
        u = h @ w[p + 'ffn_up.weight'].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + 'ffn_down.weight'].T
    x = rms(x, w['output_norm.weight'])
    out = w.get('output.weight', emb)
    return x[-1] @ out.T


PROMPTS = ['The capital of France is',
           '<|im_start|>user\nWhat is the capital of Germany?<|im_end|>\n<|im_start|>assistant\n',
           'Once upon a time, there was a little robot who']


def logits_refs(reader):
    f = lambda k: field(reader, k)
    hp = (int(f('llama.block_count')), int(f('llama.attention.head_count')), int(f('llama.attention.head_count_kv')),
          float(f('llama.attention.layer_norm_rms_epsilon')), float(f('llama.rope.freq_base')))
    w = weights(reader)
    tok = hf_tokenizer(reader, 'smollm')
    with open(os.path.join(DATA, 'smollm2_logits_refs.txt'), 'w') as out:
        out.write('# float64 numpy forward pass of SmolLM2-135M-Instruct Q4_1 (weights dequantised by gguf-py)\n')
        for p in PROMPTS:
            ids = tok.encode(p).ids
            logits = forward(w, hp, ids)
            top = np.argsort(-logits)[:64]
            greedy, seq = [], list(ids)
            for _ in range(16):
                nxt = int(np.argmax(forward(w, hp, seq))) if greedy else int(np.argmax(logits))
                greedy.append(nxt)
                seq.append(nxt)
            out.write('prompt\t' + p.encode('utf-8').hex() + '\n')
            out.write('ids\t' + ' '.join(map(str, ids)) + '\n')
            out.write('top\t' + ' '.join('%d:%.6f' % (i, logits[i]) for i in top) + '\n')
            out.write('greedy\t' + ' '.join(map(str, greedy)) + '\n')
            print('logits', repr(p), '->', repr(tok.decode(greedy)))


LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

CONVERSATIONS = [
    [('user', 'What is the capital of France?')],
    [('system', 'You are terse.'), ('user', 'Hi!')],
    [('user', 'Hello'), ('assistant', 'Hi! How can I help?'), ('user', '  Tell me a joke.\n')],
    [('user', 'line one\nline two\n\n  indented'), ('assistant', ' leading space'), ('user', '\u00e9t\u00e9 \U0001F600 123')],
]


def chat_refs(reader):
    """SmolLM2's own template (from the GGUF) and Llama 3's, rendered by jinja2; SmolLM2's also tokenised by HF."""
    import jinja2
    env = jinja2.Environment()
    smol = env.from_string(field(reader, 'tokenizer.chat_template'))
    llama3 = env.from_string(LLAMA3_TEMPLATE)
    tok = hf_tokenizer(reader, 'smollm')
    with open(os.path.join(DATA, 'chat_refs.txt'), 'w') as out:
        out.write('# jinja2 %s renderings; ids by HF tokenizers with the SmolLM2 vocabulary\n' % jinja2.__version__)
        for conv in CONVERSATIONS:
            msgs = [{'role': r, 'content': c} for r, c in conv]
            out.write('conv\n')
            for r, c in conv:
                out.write('msg\t%s\t%s\n' % (r, c.encode('utf-8').hex()))
            text = smol.render(messages=msgs, add_generation_prompt=True)
            out.write('chatml\t%s\n' % text.encode('utf-8').hex())
            out.write('chatml_ids\t%s\n' % ' '.join(map(str, tok.encode(text).ids)))
            text3 = llama3.render(messages=msgs, add_generation_prompt=True, bos_token='<|begin_of_text|>')
            out.write('llama3\t%s\n' % text3.encode('utf-8').hex())
    print('chat', len(CONVERSATIONS), 'conversations')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--smollm2', required=True)
    ap.add_argument('--corpora', default=os.path.join(HERE, '..', '..', '..', 'shared', 'corpora'))
    ap.add_argument('--skip-logits', action='store_true')
    a = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    reader = GGUFReader(a.smollm2)
    dequant_refs(reader, os.path.join(DATA, 'dequant_refs.bin'))
    tokenizer_refs(reader, a.corpora)
    chat_refs(reader)
    if not a.skip_logits:
        logits_refs(reader)


if __name__ == '__main__':
    sys.exit(main())
