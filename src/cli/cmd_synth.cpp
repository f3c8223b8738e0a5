// infokv synth: a GGUF with random weights at a real model's shapes (and a synthetic SPM vocabulary of the real
// size), for performance work without downloads. The weights are a pure function of (preset, dtype, seed).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "gguf/ggml_types.hpp"
#include "gguf/gguf_writer.hpp"
#include "util/error.hpp"
#include "util/fp16.hpp"

namespace infokv {
namespace cli {

namespace {

struct Preset {
  const char *name;
  int32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_theta, rms_eps;
  bool tied;
};

// Shapes from the models' published configs. Llama 3.x's "llama3" RoPE frequency scaling is not written (infokv
// does not implement it yet); the shapes, and therefore the cost per token, are the real ones.
const Preset kPresets[] = {
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, true},
    {"llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0f, 1e-5f, false},
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, 1e-5f, true},
    {"stories260k", 64, 5, 8, 4, 172, 512, 2048, 10000.0f, 1e-5f, false},
};

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A synthetic SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then "▁", single characters and
// letter strings with and without the word-start mark, scored so that longer pieces win merges.
void synth_vocab(int32_t n, std::vector<std::string> *tokens, std::vector<float> *scores, std::vector<int32_t> *types) {
  const std::string ws = "\xe2\x96\x81";  // U+2581
  tokens->clear();
  scores->clear();
  types->clear();
  auto add = [&](const std::string &s, float score, int32_t type) {
    if (static_cast<int32_t>(tokens->size()) < n) {
      tokens->push_back(s);
      scores->push_back(score);
      types->push_back(type);
    }
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, 6);
  }
  add(ws, -1, 1);
  for (int c = 33; c < 127; ++c) add(std::string(1, static_cast<char>(c)), -2, 1);
  for (int c = 33; c < 127; ++c) add(ws + std::string(1, static_cast<char>(c)), -3, 1);
  // letter strings of length 2, 3, ... in order, each also with the word-start mark
  for (int len = 2; static_cast<int32_t>(tokens->size()) < n; ++len) {
    std::vector<int> digits(static_cast<size_t>(len), 0);
    while (static_cast<int32_t>(tokens->size()) < n) {
      std::string w;
      for (int d : digits) w += static_cast<char>('a' + d);
      add(w, static_cast<float>(-len * 2), 1);
      add(ws + w, static_cast<float>(-len * 2 + 1), 1);
      int k = len - 1;
      while (k >= 0 && ++digits[static_cast<size_t>(k)] == 26) digits[static_cast<size_t>(k--)] = 0;
      if (k < 0) break;
    }
  }
}

}  // namespace

int cmd_synth(int argc, char **argv) {
  Args a(argc, argv, 2, {"preset", "out", "dtype", "seed"}, {"json", "quiet"});
  const std::string pname = a.str("preset", "");
  const Preset *p = nullptr;
  std::string names;
  for (const Preset &q : kPresets) {
    names += std::string(names.empty() ? "" : ", ") + q.name;
    if (pname == q.name) p = &q;
  }
  if (p == nullptr) fail(Status::invalid_argument, "--preset must be one of: " + names);
  const std::string out = a.required("out");
  const std::string dts = a.str("dtype", "f16");
  uint32_t wtype;
  if (dts == "f16") wtype = static_cast<uint32_t>(GgmlType::F16);
  else if (dts == "bf16") wtype = static_cast<uint32_t>(GgmlType::BF16);
  else if (dts == "f32") wtype = static_cast<uint32_t>(GgmlType::F32);
  else fail(Status::invalid_argument, "--dtype must be f16, bf16 or f32");
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed", 1234, 0, INT64_MAX));

  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", std::string("synthetic ") + p->name);
  w.add_u32("general.alignment", 32);
  w.add_u32("general.file_type", dts == "f32" ? 0u : (dts == "f16" ? 1u : 32u));
  w.add_u32("llama.context_length", static_cast<uint32_t>(p->n_ctx));
  w.add_u32("llama.embedding_length", static_cast<uint32_t>(p->n_embd));
  w.add_u32("llama.block_count", static_cast<uint32_t>(p->n_layer));
  w.add_u32("llama.feed_forward_length", static_cast<uint32_t>(p->n_ff));
  w.add_u32("llama.attention.head_count", static_cast<uint32_t>(p->n_head));
  w.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(p->n_head_kv));
  w.add_u32("llama.rope.dimension_count", static_cast<uint32_t>(p->n_embd / p->n_head));
  w.add_u32("llama.vocab_size", static_cast<uint32_t>(p->n_vocab));
  w.add_f32("llama.rope.freq_base", p->rope_theta);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", p->rms_eps);
  std::vector<std::string> toks;
  std::vector<float> scores;
  std::vector<int32_t> types;
  synth_vocab(p->n_vocab, &toks, &scores, &types);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_bool("tokenizer.ggml.add_bos_token", true);

  const uint64_t d = static_cast<uint64_t>(p->n_embd), hd = d / static_cast<uint64_t>(p->n_head);
  const uint64_t qd = hd * static_cast<uint64_t>(p->n_head), kvd = hd * static_cast<uint64_t>(p->n_head_kv);
  const uint64_t ff = static_cast<uint64_t>(p->n_ff), nv = static_cast<uint64_t>(p->n_vocab);
  const uint32_t f32 = static_cast<uint32_t>(GgmlType::F32);
  std::vector<float> sd;  // per tensor: standard deviation, 0 = a norm weight (all ones)
  auto mat = [&](const std::string &n, uint64_t cols, uint64_t rows, float s) { w.add_tensor(n, wtype, {cols, rows}); sd.push_back(s); };
  auto norm = [&](const std::string &n) { w.add_tensor(n, f32, {d}); sd.push_back(0.0f); };
  // std 0.02 as in the models' initialisers; residual projections scaled down with depth (GPT-2 style) so the
  // residual stream stays O(1) through many layers and the logits are not degenerate.
  const float s_out = 0.02f / std::sqrt(2.0f * static_cast<float>(p->n_layer));
  mat("token_embd.weight", d, nv, 0.02f);
  norm("output_norm.weight");
  if (!p->tied) mat("output.weight", d, nv, 0.02f);
  for (int32_t l = 0; l < p->n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight");
    mat(b + "attn_q.weight", d, qd, 0.02f);
    mat(b + "attn_k.weight", d, kvd, 0.02f);
    mat(b + "attn_v.weight", d, kvd, 0.02f);
    mat(b + "attn_output.weight", qd, d, s_out);
    norm(b + "ffn_norm.weight");
    mat(b + "ffn_gate.weight", d, ff, 0.02f);
    mat(b + "ffn_up.weight", d, ff, 0.02f);
    mat(b + "ffn_down.weight", ff, d, s_out);
  }

  const bool quiet = a.flag("quiet") || a.flag("json");
  const auto t0 = std::chrono::steady_clock::now();
  int last_pct = -1;
  w.write(
      out,
      [&](size_t i, uint64_t first, uint64_t cnt, uint8_t *buf) {
        const float s = sd[i];
        const uint64_t key = splitmix(seed * 0x100000001b3ull + i);
        const bool is_norm = s == 0.0f;
        const uint32_t type = is_norm ? f32 : wtype;
        // uniform on [-a, a] with a = s * sqrt(3) has standard deviation s
        const float amp = s * 1.7320508f;
        for (uint64_t j = 0; j < cnt; ++j) {
          float v = 1.0f;
          if (!is_norm) {
            const uint64_t r = splitmix(key ^ (first + j));
            v = (static_cast<float>(r >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * amp;
          }
          if (type == f32) std::memcpy(buf + 4 * j, &v, 4);
          else {
            const uint16_t h = type == static_cast<uint32_t>(GgmlType::F16) ? float_to_fp16(v) : float_to_bf16(v);
            std::memcpy(buf + 2 * j, &h, 2);
          }
        }
      },
      [&](uint64_t done, uint64_t total) {
        const int pct = total ? static_cast<int>(100 * done / total) : 100;
        if (!quiet && pct / 10 != last_pct / 10) {
          std::fprintf(stderr, "\rsynth: %3d%% of %.2f GB", pct, static_cast<double>(total) / 1e9);
          last_pct = pct;
        }
      });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) std::fprintf(stderr, "\n");
  uint64_t n_params = 0;
  n_params = d * nv * (p->tied ? 1 : 2) + d + static_cast<uint64_t>(p->n_layer) * (2 * d + d * qd + 2 * d * kvd + qd * d + 3 * d * ff);
  if (a.flag("json")) {
    std::printf("{\"preset\": \"%s\", \"out\": \"%s\", \"dtype\": \"%s\", \"seed\": %llu, \"n_params\": %llu, \"data_bytes\": %llu, "
                "\"seconds\": %.2f}\n",
                p->name, out.c_str(), dts.c_str(), static_cast<unsigned long long>(seed), static_cast<unsigned long long>(n_params),
                static_cast<unsigned long long>(w.data_bytes()), secs);
  } else {
    std::printf("wrote %s: synthetic %s, %s weights, seed %llu, %llu parameters, %.2f GB of tensor data in %.1f s\n", out.c_str(),
                p->name, dts.c_str(), static_cast<unsigned long long>(seed), static_cast<unsigned long long>(n_params),
                static_cast<double>(w.data_bytes()) / 1e9, secs);
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
