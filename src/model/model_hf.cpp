// Model::load_hf: a Hugging Face Llama, Mistral or Qwen2 checkpoint directory. Weights stay in the safetensors
// mappings except attn_q/attn_k (and their biases), whose rows are reordered at load: Hugging Face rotates the two
// halves of each head (rotate_half), infokv's RoPE rotates adjacent pairs (the GGUF convention), and
// rope_rows_to_pairs is the permutation llama.cpp's converter applies, so both layouts compute the same model.
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "gguf/gguf.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "model/model.hpp"
#include "model/rope.hpp"
#include "model/weight_check.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path &p, const char *what) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) fail(Status::io, std::string("cannot read ") + what + " '" + p.string() + "'");
  if (size > (uint64_t{1} << 30)) fail(Status::bad_model, std::string(what) + " '" + p.string() + "' is larger than 1 GiB");
  MappedFile f(p.string());
  return std::string(reinterpret_cast<const char *>(f.data()), f.size());
}

JsonValue json_file(const fs::path &p, const char *what) {
  return JsonValue::parse(slurp(p, what), static_cast<int32_t>(Status::bad_model), p.filename().string());
}

std::unique_ptr<JsonValue> optional_json_file(const fs::path &p, const char *what) {
  std::error_code ec;
  return fs::exists(p, ec) ? std::make_unique<JsonValue>(json_file(p, what)) : nullptr;
}

int64_t cfg_int(const JsonValue &c, const char *key, int64_t lo, int64_t hi, bool required, int64_t fallback) {
  const JsonValue *v = c.find(key);
  if (v == nullptr || v->is_null()) {
    if (required) fail(Status::bad_model, std::string("config.json has no '") + key + "'");
    return fallback;
  }
  if (!v->is_integer() || v->as_int() < lo || v->as_int() > hi)
    fail(Status::bad_model, std::string("config.json '") + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return v->as_int();
}

double cfg_num(const JsonValue &c, const char *key, double fallback) {
  const JsonValue *v = c.find(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_number()) fail(Status::bad_model, std::string("config.json '") + key + "' is not a number");
  return v->as_number();
}

uint32_t ggml_type_of(StDtype t) {
  switch (t) {
    case StDtype::F32: return static_cast<uint32_t>(GgmlType::F32);
    case StDtype::F16: return static_cast<uint32_t>(GgmlType::F16);
    case StDtype::BF16: return static_cast<uint32_t>(GgmlType::BF16);
    default: return UINT32_MAX;
  }
}

bool cfg_bool(const JsonValue &c, const char *key) {
  const JsonValue *v = c.find(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

// The architecture a config.json describes, as the GGUF name infokv uses for it: LlamaForCausalLM and
// MistralForCausalLM are "llama" (the same decoder), Qwen2ForCausalLM "qwen2". Refuses anything else and the
// Llama options infokv does not implement.
std::string hf_architecture(const JsonValue &cfg) {
  if (!cfg.is_object()) fail(Status::bad_model, "config.json is not an object");
  std::string named;
  if (const JsonValue *archs = cfg.find("architectures"); archs != nullptr && archs->is_array() && !archs->items().empty() &&
                                                           archs->items()[0].is_string())
    named = archs->items()[0].as_string();
  std::string type;
  if (const JsonValue *mt = cfg.find("model_type"); mt != nullptr && mt->is_string()) type = mt->as_string();
  std::string arch;
  if (named == "LlamaForCausalLM" || named == "MistralForCausalLM" || (named.empty() && (type == "llama" || type == "mistral")))
    arch = "llama";
  else if (named == "Qwen2ForCausalLM" || (named.empty() && type == "qwen2"))
    arch = "qwen2";
  else
    fail(Status::unsupported, "config.json describes " + (named.empty() ? "model_type '" + type + "'" : named) +
                                  "; infokv runs LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM");
  if (cfg_bool(cfg, "mlp_bias")) fail(Status::unsupported, "mlp_bias is not implemented");
  return arch;
}

// The hyperparameters config.json gives (n_vocab comes from the embedding).
void read_hparams(const JsonValue &cfg, HParams &hp) {
  hp.arch = hf_architecture(cfg);
  hp.n_embd = static_cast<int32_t>(cfg_int(cfg, "hidden_size", 1, 1 << 16, true, 0));
  hp.n_layer = static_cast<int32_t>(cfg_int(cfg, "num_hidden_layers", 1, 1024, true, 0));
  hp.n_head = static_cast<int32_t>(cfg_int(cfg, "num_attention_heads", 1, 1024, true, 0));
  hp.n_head_kv = static_cast<int32_t>(cfg_int(cfg, "num_key_value_heads", 1, hp.n_head, false, hp.n_head));
  hp.n_ff = static_cast<int32_t>(cfg_int(cfg, "intermediate_size", 1, 1 << 20, true, 0));
  hp.n_ctx_train = static_cast<int32_t>(cfg_int(cfg, "max_position_embeddings", 1, 1 << 24, false, 2048));
  if (hp.n_embd % hp.n_head != 0) fail(Status::bad_model, "hidden_size is not a multiple of num_attention_heads");
  hp.head_dim = static_cast<int32_t>(cfg_int(cfg, "head_dim", 2, 1024, false, hp.n_embd / hp.n_head));
  if (hp.head_dim % 2 != 0) fail(Status::bad_model, "head size must be even for RoPE");
  if (hp.n_head % hp.n_head_kv != 0) fail(Status::bad_model, "num_attention_heads is not a multiple of num_key_value_heads");
  double theta = 10000.0;
  parse_hf_rope(cfg, hp.n_ctx_train, &theta, &hp.rope);
  const double eps = cfg_num(cfg, "rms_norm_eps", 1e-6);
  if (!(eps > 0 && eps < 1)) fail(Status::bad_model, "rms_norm_eps out of range");
  if (!(theta > 1 && theta < 1e12)) fail(Status::bad_model, "rope_theta out of range");
  hp.rms_eps = static_cast<float>(eps);
  hp.rope_theta = static_cast<float>(theta);
  // A sliding attention window (Mistral v0.1; Qwen2 with use_sliding_window) is recorded and reported: attention
  // is exact up to the window's length, and beyond it infokv attends to the whole (compressed) cache instead.
  const bool sliding = hp.arch == "qwen2" ? cfg_bool(cfg, "use_sliding_window") : true;
  if (sliding) {
    // transformers' MistralConfig defaults to a 4096-token window when config.json does not say.
    const JsonValue *mt = cfg.find("model_type");
    const bool mistral = mt != nullptr && mt->is_string() && mt->as_string() == "mistral";
    const int64_t w = cfg_int(cfg, "sliding_window", 1, 1 << 24, false, mistral && cfg.find("sliding_window") == nullptr ? 4096 : 0);
    if (w > 0 && w < hp.n_ctx_train) hp.sliding_window = static_cast<int32_t>(w);
  }
}

// Shards: model.safetensors.index.json's weight_map, else model.safetensors.
std::vector<std::string> shard_files(const fs::path &dir) {
  std::error_code ec;
  std::vector<std::string> files;
  if (!fs::exists(dir / "model.safetensors.index.json", ec)) return {"model.safetensors"};
  const JsonValue idx = json_file(dir / "model.safetensors.index.json", "model.safetensors.index.json");
  const JsonValue *wm = idx.find("weight_map");
  if (wm == nullptr || !wm->is_object()) fail(Status::bad_model, "model.safetensors.index.json has no weight_map");
  std::set<std::string> seen;
  for (const auto &kv : wm->members()) {
    if (!kv.second.is_string()) fail(Status::bad_model, "weight_map entry '" + kv.first + "' is not a file name");
    const std::string &f = kv.second.as_string();
    // A shard is a file of this directory, never a path that leaves it.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      fail(Status::bad_model, "weight_map names the shard '" + f + "', which is not a file name of the checkpoint");
    if (seen.insert(f).second) files.push_back(f);
  }
  return files;
}

using TensorMap = std::map<std::string, const StTensor *>;

const StTensor &require_tensor(const TensorMap &tensors, const std::string &name) {
  auto it = tensors.find(name);
  if (it == tensors.end()) fail(Status::bad_model, "missing tensor '" + name + "'");
  return *it->second;
}

// A [rows, cols] matrix, or (cols == 0) a [rows] vector.
void check_shape(const StTensor &t, uint64_t rows, uint64_t cols) {
  if ((cols == 0 && t.shape.size() == 1 && t.shape[0] == rows) || (t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == cols)) return;
  std::string s;
  for (uint64_t d : t.shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  fail(Status::bad_model, "tensor '" + t.name + "' has shape [" + s + "], expected [" + std::to_string(rows) +
                              (cols ? ", " + std::to_string(cols) : "") + "]");
}

// A weight matrix used in place from the mapping; head_rows > 0: each head's rows reordered from rotate-half to
// adjacent pairs into a buffer appended to `owned`.
Weight hf_matrix(const TensorMap &tensors, const std::string &name, uint64_t rows, uint64_t cols, int64_t head_rows,
                 std::vector<std::vector<uint8_t>> &owned) {
  const StTensor &t = require_tensor(tensors, name);
  check_shape(t, rows, cols);
  Weight w;
  w.type = ggml_type_of(t.dtype);
  if (w.type == UINT32_MAX) fail(Status::unsupported, std::string("unsupported dtype ") + st_dtype_name(t.dtype) + " in " + name);
  w.rows = static_cast<int64_t>(rows);
  w.cols = static_cast<int64_t>(cols);
  w.name = name;
  w.data = t.data;
  if (head_rows > 0) {
    std::vector<uint8_t> out(t.n_bytes);
    rope_rows_to_pairs(t.data, out.data(), static_cast<int64_t>(rows), static_cast<size_t>(cols) * st_dtype_size(t.dtype), head_rows);
    owned.push_back(std::move(out));
    w.data = owned.back().data();
  }
  return w;
}

// A norm vector as f32, checked finite.
std::vector<float> hf_vec(const TensorMap &tensors, const std::string &name, uint64_t n) {
  const StTensor &t = require_tensor(tensors, name);
  check_shape(t, n, 0);
  std::vector<float> v(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case StDtype::F32: std::memcpy(&v[i], t.data + 4 * i, 4); break;
      case StDtype::F16: case StDtype::BF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        v[i] = t.dtype == StDtype::F16 ? fp16_to_float(h) : bf16_to_float(h);
        break;
      }
      default: fail(Status::unsupported, std::string("unsupported dtype ") + st_dtype_name(t.dtype) + " in " + name);
    }
  }
  check_finite(v, name);
  return v;
}

// A projection bias if the checkpoint has one (empty otherwise), reordered like its matrix when head_dim > 0.
std::vector<float> hf_bias(const TensorMap &tensors, const std::string &name, uint64_t n, int64_t head_dim) {
  if (tensors.count(name) == 0) return {};
  std::vector<float> v = hf_vec(tensors, name, n);
  if (head_dim <= 0) return v;
  std::vector<float> out(v.size());
  rope_rows_to_pairs(reinterpret_cast<const uint8_t *>(v.data()), reinterpret_cast<uint8_t *>(out.data()),
                     static_cast<int64_t>(n), sizeof(float), head_dim);
  return out;
}

// FNV-1a over every tensor's name, dtype, shape and 64 sampled byte runs.
uint64_t hf_fingerprint(const TensorMap &tensors) {
  uint64_t h = 1469598103934665603ull;
  auto fnv = [&h](const void *p, size_t n) {
    const auto *b = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ull; }
  };
  for (const auto &kv : tensors) {
    const StTensor &t = *kv.second;
    fnv(t.name.data(), t.name.size());
    fnv(&t.dtype, sizeof(t.dtype));
    for (uint64_t dim : t.shape) fnv(&dim, sizeof(dim));
    const uint64_t step = t.n_bytes / 64 + 1;
    for (uint64_t off = 0; off < t.n_bytes; off += step) fnv(t.data + off, static_cast<size_t>(std::min<uint64_t>(64, t.n_bytes - off)));
  }
  return h;
}

}  // namespace

Tokenizer Model::load_tokenizer(const std::string &path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return Tokenizer::from_gguf(GgufFile(path));
  const fs::path dir(path);
  const std::unique_ptr<JsonValue> tcfg = optional_json_file(dir / "tokenizer_config.json", "tokenizer_config.json");
  const std::unique_ptr<JsonValue> cfg = optional_json_file(dir / "config.json", "config.json");
  return Tokenizer::from_hf(json_file(dir / "tokenizer.json", "tokenizer.json"), tcfg.get(), cfg.get());
}

std::shared_ptr<const Model> Model::load_hf(const std::string &dir_str) {
  const fs::path dir(dir_str);
  std::shared_ptr<Model> m(new Model());
  m->path_ = dir_str;
  m->format_ = "safetensors";
  const JsonValue cfg = json_file(dir / "config.json", "config.json");
  HParams &hp = m->hp_;
  read_hparams(cfg, hp);
  const JsonValue *tie = cfg.find("tie_word_embeddings");
  const bool tie_cfg = tie != nullptr && tie->is_bool() && tie->as_bool();

  // Tokenizer and chat template.
  std::unique_ptr<JsonValue> tcfg = optional_json_file(dir / "tokenizer_config.json", "tokenizer_config.json");
  std::error_code ec;
  const bool has_tokenizer = fs::exists(dir / "tokenizer.json", ec);
  if (has_tokenizer) m->tok_ = Tokenizer::from_hf(json_file(dir / "tokenizer.json", "tokenizer.json"), tcfg.get(), &cfg);
  if (tcfg != nullptr)
    if (const JsonValue *ct = tcfg->find("chat_template"); ct != nullptr && ct->is_string()) m->chat_template_ = ct->as_string();
  if (const JsonValue *nm = cfg.find("_name_or_path"); nm != nullptr && nm->is_string()) m->name_ = nm->as_string();

  TensorMap tensors;
  for (const std::string &f : shard_files(dir)) {
    m->shards_.push_back(std::make_unique<SafetensorsFile>((dir / f).string()));
    m->file_bytes_ += fs::file_size(dir / f, ec);
    for (const StTensor &t : m->shards_.back()->tensors()) {
      if (!tensors.emplace(t.name, &t).second) fail(Status::bad_model, "tensor '" + t.name + "' appears in two shards");
      ++m->tensor_types_[st_dtype_name(t.dtype)];
      m->n_params_ += t.n_elements;
      m->weight_bytes_ += t.n_bytes;
    }
  }

  const StTensor &emb = require_tensor(tensors, "model.embed_tokens.weight");
  if (emb.shape.size() != 2 || emb.shape[1] != static_cast<uint64_t>(hp.n_embd) || emb.shape[0] == 0 || emb.shape[0] > (1u << 24))
    fail(Status::bad_model, "tensor 'model.embed_tokens.weight' must be [n_vocab, hidden_size]");
  hp.n_vocab = static_cast<int32_t>(emb.shape[0]);
  // A checkpoint saved without its tokenizer (transformers' save_pretrained of a model alone) runs on token ids.
  if (!has_tokenizer) {
    auto special = [&](const char *key) {
      const JsonValue *v = cfg.find(key);
      if (v != nullptr && v->is_array() && !v->items().empty()) v = &v->items()[0];
      return v != nullptr && v->is_integer() ? static_cast<int32_t>(v->as_int()) : -1;
    };
    m->tok_ = Tokenizer::without_vocabulary(hp.n_vocab, special("bos_token_id"), special("eos_token_id"));
  }
  if (m->tok_.n_vocab() != hp.n_vocab)
    fail(Status::bad_model, "tokenizer has " + std::to_string(m->tok_.n_vocab()) + " tokens but the embedding has " +
                                std::to_string(hp.n_vocab) + " rows");
  const uint64_t d = static_cast<uint64_t>(hp.n_embd), hd = static_cast<uint64_t>(hp.head_dim);
  const uint64_t q_dim = hd * static_cast<uint64_t>(hp.n_head), kv_dim = hd * static_cast<uint64_t>(hp.n_head_kv);
  const uint64_t ff = static_cast<uint64_t>(hp.n_ff), nv = static_cast<uint64_t>(hp.n_vocab);
  std::vector<std::vector<uint8_t>> &owned = m->owned_;
  m->tok_embd_ = hf_matrix(tensors, "model.embed_tokens.weight", nv, d, 0, owned);
  if (tensors.count("lm_head.weight") != 0 && !tie_cfg) {
    m->output_ = hf_matrix(tensors, "lm_head.weight", nv, d, 0, owned);
  } else {
    m->output_ = m->tok_embd_;
    m->tied_ = true;
  }
  check_finite_rows(m->tok_embd_);
  if (!m->tied_) check_finite_rows(m->output_);
  m->out_norm_ = hf_vec(tensors, "model.norm.weight", d);
  const bool needs_bias = hp.arch == "qwen2" || cfg_bool(cfg, "attention_bias");
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights &L = m->layers_[static_cast<size_t>(l)];
    L.attn_norm = hf_vec(tensors, p + "input_layernorm.weight", d);
    L.wq = hf_matrix(tensors, p + "self_attn.q_proj.weight", q_dim, d, hp.head_dim, owned);
    L.wk = hf_matrix(tensors, p + "self_attn.k_proj.weight", kv_dim, d, hp.head_dim, owned);
    L.wv = hf_matrix(tensors, p + "self_attn.v_proj.weight", kv_dim, d, 0, owned);
    L.wo = hf_matrix(tensors, p + "self_attn.o_proj.weight", d, q_dim, 0, owned);
    // Qwen2 always has q/k/v biases; Llama has q/k/v/o biases with attention_bias. Whatever the checkpoint holds is
    // used, and a config that promises biases must hold them.
    L.bq = hf_bias(tensors, p + "self_attn.q_proj.bias", q_dim, hp.head_dim);
    L.bk = hf_bias(tensors, p + "self_attn.k_proj.bias", kv_dim, hp.head_dim);
    L.bv = hf_bias(tensors, p + "self_attn.v_proj.bias", kv_dim, 0);
    L.bo = hf_bias(tensors, p + "self_attn.o_proj.bias", d, 0);
    if (needs_bias && (L.bq.empty() || L.bk.empty() || L.bv.empty()))
      fail(Status::bad_model, "missing tensor '" + p + "self_attn." + (L.bq.empty() ? "q" : L.bk.empty() ? "k" : "v") + "_proj.bias'");
    L.ffn_norm = hf_vec(tensors, p + "post_attention_layernorm.weight", d);
    L.w_gate = hf_matrix(tensors, p + "mlp.gate_proj.weight", ff, d, 0, owned);
    L.w_up = hf_matrix(tensors, p + "mlp.up_proj.weight", ff, d, 0, owned);
    L.w_down = hf_matrix(tensors, p + "mlp.down_proj.weight", d, ff, 0, owned);
  }
  m->weights_fp_ = hf_fingerprint(tensors);
  return m;
}

}  // namespace infokv
