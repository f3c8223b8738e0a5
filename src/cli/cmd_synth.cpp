// infokv synth: a GGUF, or a Hugging Face checkpoint directory (synth_hf.cpp), with random weights at a real
// model's shapes (and a synthetic vocabulary of the real size), for performance work without downloads. The
// weights are a pure function of (preset, dtype, seed), the same in both formats.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "cli/synth.hpp"
#include "gguf/gguf_writer.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "model/rope.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

namespace synth {

namespace {

// Shapes, base frequencies, RoPE scaling, biases and tying from the models' published config.json files (mistral-7b
// is v0.3: 32768 tokens, theta 1e6, no sliding window).
const Preset kPresets[] = {
    {"llama-3.2-1b", "llama", "LlamaForCausalLM", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false, 32.0f, 1.0f, 4.0f, 8192},
    {"llama-3.2-3b", "llama", "LlamaForCausalLM", "llama", 3072, 28, 24, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false, 32.0f, 1.0f, 4.0f, 8192},
    {"llama-3.1-8b", "llama", "LlamaForCausalLM", "llama", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0f, 1e-5f, false, false, 8.0f, 1.0f, 4.0f, 8192},
    {"qwen2.5-0.5b", "qwen2", "Qwen2ForCausalLM", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, true, 0, 0, 0, 0},
    {"tinyllama-1.1b", "llama", "LlamaForCausalLM", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f, false, false, 0, 0, 0, 0},
    {"mistral-7b", "llama", "MistralForCausalLM", "mistral", 4096, 32, 32, 8, 14336, 32768, 32768, 1000000.0f, 1e-5f, false, false, 0, 0, 0, 0},
    {"smollm2-135m", "llama", "LlamaForCausalLM", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, 1e-5f, true, false, 0, 0, 0, 0},
    {"stories260k", "llama", "LlamaForCausalLM", "llama", 64, 5, 8, 4, 172, 512, 2048, 10000.0f, 1e-5f, false, false, 0, 0, 0, 0},
};

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::string preset_names() {
  std::string names;
  for (const Preset &q : kPresets) names += std::string(names.empty() ? "" : ", ") + q.name;
  return names;
}

const Preset &find_preset(const std::string &name) {
  for (const Preset &q : kPresets)
    if (name == q.name) return q;
  fail(Status::invalid_argument, "--preset must be one of: " + preset_names());
}

std::vector<Tensor> tensors(const Preset &p) {
  const uint64_t d = static_cast<uint64_t>(p.n_embd), hd = d / static_cast<uint64_t>(p.n_head);
  const uint64_t qd = hd * static_cast<uint64_t>(p.n_head), kvd = hd * static_cast<uint64_t>(p.n_head_kv);
  const uint64_t ff = static_cast<uint64_t>(p.n_ff), nv = static_cast<uint64_t>(p.n_vocab);
  std::vector<Tensor> t;
  auto mat = [&](const std::string &g, const std::string &h, uint64_t rows, uint64_t cols, float sd, int64_t rope = 0) {
    t.push_back(Tensor{g, h, rows, cols, sd, rope, {}});
  };
  auto norm = [&](const std::string &g, const std::string &h) { t.push_back(Tensor{g, h, d, 0, 0.0f, 0, {}}); };
  // Biases at 0.1, larger than the weights' scale, so a bias that is dropped or misplaced changes the logits.
  auto bias = [&](const std::string &g, const std::string &h, uint64_t n, int64_t rope = 0) {
    t.push_back(Tensor{g, h, n, 0, 0.1f, rope, {}});
  };
  // std 0.02 as in the models' initialisers; residual projections scaled down with depth (GPT-2 style) so the
  // residual stream stays O(1) through many layers and the logits are not degenerate.
  const float s_out = 0.02f / std::sqrt(2.0f * static_cast<float>(p.n_layer));
  mat("token_embd.weight", "model.embed_tokens.weight", nv, d, 0.02f);
  norm("output_norm.weight", "model.norm.weight");
  if (!p.tied) mat("output.weight", "lm_head.weight", nv, d, 0.02f);
  for (int32_t l = 0; l < p.n_layer; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    norm(g + "attn_norm.weight", h + "input_layernorm.weight");
    mat(g + "attn_q.weight", h + "self_attn.q_proj.weight", qd, d, 0.02f, static_cast<int64_t>(hd));
    mat(g + "attn_k.weight", h + "self_attn.k_proj.weight", kvd, d, 0.02f, static_cast<int64_t>(hd));
    mat(g + "attn_v.weight", h + "self_attn.v_proj.weight", kvd, d, 0.02f);
    if (p.qkv_bias) {
      bias(g + "attn_q.bias", h + "self_attn.q_proj.bias", qd, static_cast<int64_t>(hd));
      bias(g + "attn_k.bias", h + "self_attn.k_proj.bias", kvd, static_cast<int64_t>(hd));
      bias(g + "attn_v.bias", h + "self_attn.v_proj.bias", kvd);
    }
    mat(g + "attn_output.weight", h + "self_attn.o_proj.weight", d, qd, s_out);
    norm(g + "ffn_norm.weight", h + "post_attention_layernorm.weight");
    mat(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", ff, d, 0.02f);
    mat(g + "ffn_up.weight", h + "mlp.up_proj.weight", ff, d, 0.02f);
    mat(g + "ffn_down.weight", h + "mlp.down_proj.weight", d, ff, s_out);
  }
  if (p.rope_factor > 0) {
    // llama.cpp's converter stores llama3 scaling in a GGUF as per-pair divisors of the frequencies; the checkpoint
    // carries rope_scaling in config.json instead. Last in the list, so the other tensors keep their streams.
    RopeScaling s;
    s.type = RopeScalingType::llama3;
    s.factor = p.rope_factor;
    s.low_freq_factor = p.rope_low_freq;
    s.high_freq_factor = p.rope_high_freq;
    s.original_ctx = p.rope_original_ctx;
    const std::vector<double> plain = rope_inv_freq(p.rope_theta, static_cast<int32_t>(hd), RopeScaling(), 0);
    const std::vector<double> scaled = rope_inv_freq(p.rope_theta, static_cast<int32_t>(hd), s, 0);
    Tensor f{"rope_freqs.weight", "", hd / 2, 0, 0.0f, 0, {}};
    for (size_t i = 0; i < plain.size(); ++i) f.values.push_back(static_cast<float>(plain[i] / scaled[i]));
    t.push_back(std::move(f));
  }
  return t;
}

uint64_t rotate_half_source(const Tensor &t, uint64_t e) {
  if (t.rope_head_dim == 0) return e;
  // Row h*hd + j*hd/2 + i of the rotate-half layout is row h*hd + 2i + j of the adjacent-pairs one.
  const uint64_t cols = t.cols ? t.cols : 1;
  const uint64_t hd = static_cast<uint64_t>(t.rope_head_dim), half = hd / 2;
  const uint64_t r = e / cols, c = e % cols, h = r / hd, rem = r % hd;
  return (h * hd + 2 * (rem % half) + rem / half) * cols + c;
}

float element(const std::vector<Tensor> &ts, size_t index, uint64_t seed, uint64_t e, bool rotate_half) {
  const Tensor &t = ts[index];
  if (!t.values.empty()) return t.values[static_cast<size_t>(e)];
  return weight(tensor_key(seed, index), t.sd, rotate_half ? rotate_half_source(t, e) : e);
}

uint64_t tensor_key(uint64_t seed, size_t index) { return splitmix(seed * 0x100000001b3ull + index); }

float weight(uint64_t key, float sd, uint64_t e) {
  if (sd == 0.0f) return 1.0f;
  // uniform on [-a, a] with a = sd * sqrt(3) has standard deviation sd
  const float amp = sd * 1.7320508f;
  const uint64_t r = splitmix(key ^ e);
  return (static_cast<float>(r >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * amp;
}

void store(float v, StDtype dtype, uint8_t *out) {
  if (dtype == StDtype::F32) {
    std::memcpy(out, &v, 4);
  } else {
    const uint16_t h = dtype == StDtype::F16 ? float_to_fp16(v) : float_to_bf16(v);
    std::memcpy(out, &h, 2);
  }
}

namespace {

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

// The GGUF: llama.* hyperparameters, a synthetic SentencePiece vocabulary, the tensors in `ts` order.
uint64_t write_gguf(const std::string &out, const Preset &p, const std::vector<Tensor> &ts, StDtype wdt, const std::string &dts,
                    uint64_t seed, const std::function<void(uint64_t, uint64_t)> &progress) {
  GgufWriter w;
  const std::string a = std::string(p.arch) + ".";
  w.add_string("general.architecture", p.arch);
  w.add_string("general.name", std::string("synthetic ") + p.name);
  w.add_u32("general.alignment", 32);
  w.add_u32("general.file_type", dts == "f32" ? 0u : (dts == "f16" ? 1u : 32u));
  w.add_u32(a + "context_length", static_cast<uint32_t>(p.n_ctx));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(p.n_embd));
  w.add_u32(a + "block_count", static_cast<uint32_t>(p.n_layer));
  w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(p.n_ff));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(p.n_head));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(p.n_head_kv));
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(p.n_embd / p.n_head));
  w.add_u32(a + "vocab_size", static_cast<uint32_t>(p.n_vocab));
  w.add_f32(a + "rope.freq_base", p.rope_theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  std::vector<std::string> toks;
  std::vector<float> scores;
  std::vector<int32_t> types;
  synth_vocab(p.n_vocab, &toks, &scores, &types);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_bool("tokenizer.ggml.add_bos_token", true);

  auto ggml = [](StDtype t) {
    return static_cast<uint32_t>(t == StDtype::F32 ? GgmlType::F32 : t == StDtype::F16 ? GgmlType::F16 : GgmlType::BF16);
  };
  for (const Tensor &t : ts) {
    // norm weights and biases stay f32, as llama.cpp's converter writes them
    if (t.cols == 0) w.add_tensor(t.gguf_name, ggml(StDtype::F32), {t.rows});
    else w.add_tensor(t.gguf_name, ggml(wdt), {t.cols, t.rows});
  }
  // llama.cpp runs qwen2 in NEOX mode, so its GGUFs keep Hugging Face's rotate-half order of q/k rows.
  const bool rotate_half = std::string(p.arch) == "qwen2";
  w.write(
      out,
      [&](size_t i, uint64_t first, uint64_t cnt, uint8_t *buf) {
        const StDtype dt = ts[i].cols == 0 ? StDtype::F32 : wdt;
        const size_t es = st_dtype_size(dt);
        for (uint64_t j = 0; j < cnt; ++j) store(element(ts, i, seed, first + j, rotate_half), dt, buf + es * j);
      },
      progress);
  return w.data_bytes();
}

}  // namespace

}  // namespace synth

int cmd_synth(int argc, char **argv) {
  Args a(argc, argv, 2, {"preset", "out", "dtype", "seed", "format", "layers"}, {"json", "quiet"});
  synth::Preset p = synth::find_preset(a.str("preset", ""));
  // Fewer layers keep a real model's widths (and so its kernels and memory per token) at a fraction of the size.
  p.n_layer = static_cast<int32_t>(a.integer("layers", p.n_layer, 1, p.n_layer));
  const std::string out = a.required("out");
  const std::string format = a.str("format", "gguf");
  if (format != "gguf" && format != "safetensors") fail(Status::invalid_argument, "--format must be gguf or safetensors");
  if (format == "safetensors" && out.size() >= 5 && out.compare(out.size() - 5, 5, ".gguf") == 0)
    fail(Status::invalid_argument, "--format safetensors writes a checkpoint directory, but --out '" + out + "' names a .gguf file");
  const std::string dts = a.str("dtype", "f16");
  StDtype wdt;
  if (dts == "f16") wdt = StDtype::F16;
  else if (dts == "bf16") wdt = StDtype::BF16;
  else if (dts == "f32") wdt = StDtype::F32;
  else fail(Status::invalid_argument, "--dtype must be f16, bf16 or f32");
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed", 1234, 0, INT64_MAX));

  const bool quiet = a.flag("quiet") || a.flag("json");
  int last_pct = -1;
  auto progress = [&](uint64_t done, uint64_t total) {
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (!quiet && pct / 10 != last_pct / 10) {
      std::fprintf(stderr, "\rsynth: %3d%% of %.2f GB", pct, static_cast<double>(total) / 1e9);
      last_pct = pct;
    }
  };
  const std::vector<synth::Tensor> ts = synth::tensors(p);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t data_bytes = 0;
  if (format == "safetensors") {
    data_bytes = synth::write_hf_checkpoint(out, p, wdt, seed, progress);
  } else {
    data_bytes = synth::write_gguf(out, p, ts, wdt, dts, seed, progress);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) std::fprintf(stderr, "\n");
  uint64_t n_params = 0;
  for (const synth::Tensor &t : ts) n_params += t.n_elements();
  if (a.flag("json")) {
    char sec[32];
    std::snprintf(sec, sizeof sec, "%.2f", secs);
    std::printf("%s\n", JsonObject()
                            .str("preset", p.name)
                            .str("architecture", p.arch)
                            .integer("layers", p.n_layer)
                            .str("out", out)
                            .str("dtype", dts)
                            .integer("seed", static_cast<int64_t>(seed))
                            .integer("n_params", static_cast<int64_t>(n_params))
                            .integer("data_bytes", static_cast<int64_t>(data_bytes))
                            .raw("seconds", sec)
                            .str("format", format)
                            .dump()
                            .c_str());
  } else {
    std::printf("wrote %s: synthetic %s, %s weights, seed %llu, %llu parameters, %.2f GB of tensor data in %.1f s%s\n", out.c_str(),
                p.name, dts.c_str(), static_cast<unsigned long long>(seed), static_cast<unsigned long long>(n_params),
                static_cast<double>(data_bytes) / 1e9, secs,
                format == "safetensors" ? " (model.safetensors, config.json, tokenizer.json, tokenizer_config.json)" : "");
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
