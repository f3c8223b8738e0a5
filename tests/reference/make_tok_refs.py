#!/usr/bin/env python3
"""Reference ids for the Qwen2 and Llama-2-style (SentencePiece BPE) Hugging Face tokenizers, from the `tokenizers`
library (kept in the repository, not run in CI; its outputs are committed under tests/data/). A sibling of
make_refs.py, whose edge cases, corpus lines and fuzz strings it reuses.

  pip install --target /tmp/refpy gguf tokenizers      # gguf 0.19.0, tokenizers 0.23.3 were used
  PYTHONPATH=/tmp/refpy python3 tests/reference/make_tok_refs.py \
      --smollm2 PATH/SmolLM2-135M-Instruct.Q4_1.gguf --corpora ../shared/corpora

Writes
  tests/data/bpe_qwen2pre_refs.txt   ids of the SmolLM2 vocabulary and merges (read from the GGUF) under Qwen2's
                                     pre-tokeniser (Split with Qwen2's regex + ByteLevel without regex), no
                                     normaliser: what the GGUF path with tokenizer.ggml.pre = "qwen2" must give.
  tests/data/hf_qwen2_tiny/          tokenizer.json + tokenizer_config.json of a small byte-level BPE trained here on
                                     the corpora, laid out as Qwen2/Qwen2.5's: NFC normaliser, the Split + ByteLevel
                                     pre-tokeniser, <|endoftext|>/<|im_start|>/<|im_end|> as special added tokens.
  tests/data/hf_qwen2_tiny_refs.txt  its ids (without special tokens added by the post-processor).
  tests/data/hf_llama2_tiny/         a small SentencePiece-style BPE with byte fallback trained here, in the older
                                     Llama 2 / TinyLlama layout (normaliser Prepend("▁") + Replace(" ", "▁"), no
                                     pre-tokeniser, <unk> <s> </s> then <0x00>..<0xFF> first in the vocabulary).
  tests/data/hf_llama2meta_tiny/     the same vocabulary and merges in the newer layout (no normaliser, pre-tokeniser
                                     Metaspace("▁", prepend_scheme "first", split false)).
  tests/data/hf_llama2_tiny_refs.txt, tests/data/hf_llama2meta_tiny_refs.txt   their ids.
Lines of the *_refs.txt files: hex(input bytes) TAB ids separated by spaces.
"""
import argparse
import json
import os
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)
import tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_refs  # noqa: E402  (EDGE, corpus_cases, fuzz_cases, field)

DATA = make_refs.DATA

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
LLAMA2_SPECIALS = ['<unk>', '<s>', '</s>']

# Cases this file adds to make_refs.EDGE: digit runs, contractions in upper case, text that NFC changes (combining
# marks, a compatibility-free singleton, Hangul jamo), emoji and CJK that need byte fallback in a small vocabulary,
# spaces around special tokens.
EXTRA = [
    '12345', '0', '2024-06-01 12:30', "I'LL don't WON'T it'S", "can't'", "'ll",
    'e\u0301t\u00e9', 'A\u030a \u212b \u00c5', '\u1100\u1161\u11a8', 'o\u0308\u0304', 'cafe\u0301s',
    '\U0001F600', '\U0001F469\u200d\U0001F4BB tech', '\u4e2d\u6587 text', '\u00a0\u00a0x',
    ' leading', 'trailing ', '  two  spaces  ', '     ', '\t', ' \n ', 'a\n\nb\n',
    '<s>hi', '<s> hi', 'hi</s>', 'hi</s>hi', '<unk>', ' <s>', '<|im_start|>system\nYou are Qwen.<|im_end|>\n',
    '<|im_start|> x', 'x <|endoftext|> y', '<|endoftext|>',
]


def cases(corpora):
    return make_refs.EDGE + EXTRA + make_refs.corpus_cases(corpora) + make_refs.fuzz_cases()


def write_refs(tok, name, texts, comment):
    with open(os.path.join(DATA, name), 'w') as f:
        f.write('# %s; tokenizers %s; hex(utf8) TAB ids\n' % (comment, tokenizers.__version__))
        for c in texts:
            ids = tok.encode(c, add_special_tokens=False).ids
            f.write(c.encode('utf-8').hex() + '\t' + ' '.join(map(str, ids)) + '\n')
    print(name, len(texts), 'cases')


def qwen2_pre():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior='isolated', invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])


def qwen2_pre_on_smollm2(reader, texts):
    tokens = make_refs.field(reader, 'tokenizer.ggml.tokens')
    types = make_refs.field(reader, 'tokenizer.ggml.token_type')
    merges = [tuple(m.split(' ', 1)) for m in make_refs.field(reader, 'tokenizer.ggml.merges')]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, ignore_merges=False))
    tok.pre_tokenizer = qwen2_pre()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] in (3, 4)])
    write_refs(tok, 'bpe_qwen2pre_refs.txt', texts, 'qwen2 pre-tokeniser, SmolLM2 vocabulary')


def training_files(corpora):
    names = ('prideandprejudice.txt', 'emma.txt', 'sample_story.txt')
    return [os.path.join(corpora, n) for n in names if os.path.exists(os.path.join(corpora, n))]


def save_dir(tok, name, config):
    d = os.path.join(DATA, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, 'tokenizer.json'))
    with open(os.path.join(d, 'tokenizer_config.json'), 'w') as f:
        json.dump(config, f, indent=2)
        f.write('\n')
    print(name, os.path.getsize(os.path.join(d, 'tokenizer.json')), 'bytes')


def qwen2_tiny(files, texts):
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = qwen2_pre()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    # Qwen2 puts its specials after the learned vocabulary.
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN2_SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    save_dir(tok, 'hf_qwen2_tiny', {'add_bos_token': False, 'bos_token': None, 'eos_token': '<|im_end|>',
                                    'pad_token': '<|endoftext|>', 'tokenizer_class': 'Qwen2Tokenizer'})
    write_refs(tok, 'hf_qwen2_tiny_refs.txt', texts, 'hf_qwen2_tiny/tokenizer.json (NFC + Qwen2 pre-tokeniser)')


def llama2_tiny(files, texts):
    # Learn pieces within words (as SentencePiece does), then lay the vocabulary out as Llama 2's.
    learn = Tokenizer(models.BPE())
    learn.normalizer = normalizers.Replace(' ', '\u2581')
    learn.pre_tokenizer = pre_tokenizers.Metaspace(replacement='\u2581', prepend_scheme='always', split=True)
    learn.train(files, trainers.BpeTrainer(vocab_size=1000, min_frequency=2, limit_alphabet=70, show_progress=False))
    learned = json.loads(learn.to_str())['model']
    vocab = {s: i for i, s in enumerate(LLAMA2_SPECIALS)}
    for b in range(256):
        vocab['<0x%02X>' % b] = len(vocab)
    for piece, _ in sorted(learned['vocab'].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(' ', 1)) for m in learned['merges']]

    def build(form):
        tok = Tokenizer(models.BPE(vocab=dict(vocab), merges=merges, unk_token='<unk>', fuse_unk=True,
                                   byte_fallback=True))
        if form == 'prepend':
            tok.normalizer = normalizers.Sequence([normalizers.Prepend('\u2581'), normalizers.Replace(' ', '\u2581')])
            tok.decoder = decoders.Sequence([decoders.Replace('\u2581', ' '), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(' ', 1, 0)])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement='\u2581', prepend_scheme='first', split=False)
            tok.decoder = decoders.Metaspace(replacement='\u2581', prepend_scheme='first', split=False)
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA2_SPECIALS])
        tok.post_processor = processors.TemplateProcessing(single='<s> $A', pair='<s> $A <s> $B',
                                                           special_tokens=[('<s>', 1)])
        return tok

    config = {'add_bos_token': True, 'add_eos_token': False, 'bos_token': '<s>', 'eos_token': '</s>',
              'unk_token': '<unk>', 'legacy': False, 'tokenizer_class': 'LlamaTokenizer'}
    for form, name in (('prepend', 'hf_llama2_tiny'), ('meta', 'hf_llama2meta_tiny')):
        tok = build(form)
        save_dir(tok, name, config)
        write_refs(tok, name + '_refs.txt', texts, name + '/tokenizer.json (SentencePiece-style BPE, byte fallback)')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--smollm2', required=True)
    ap.add_argument('--corpora', default=os.path.join(make_refs.HERE, '..', '..', '..', 'shared', 'corpora'))
    a = ap.parse_args()
    texts = cases(a.corpora)
    qwen2_pre_on_smollm2(make_refs.GGUFReader(a.smollm2), texts)
    files = training_files(a.corpora)
    qwen2_tiny(files, texts)
    llama2_tiny(files, texts)


if __name__ == '__main__':
    sys.exit(main())
