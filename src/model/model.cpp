#include "model/model.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "model/weight_check.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

bool matmul_type_supported(uint32_t t) { return cpu::weight_type_supported(t); }

const GgufTensor &require_tensor(const GgufFile &f, const std::string &name) {
  const GgufTensor *t = f.find_tensor(name);
  if (t == nullptr) fail(Status::bad_model, "missing tensor '" + name + "'");
  return *t;
}

std::string shape_str(const GgufTensor &t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

void check_shape(const GgufTensor &t, uint64_t ne0, uint64_t ne1) {
  bool ok = (t.n_dims == 2 && t.ne[0] == ne0 && t.ne[1] == ne1) || (ne1 == 1 && t.n_dims == 1 && t.ne[0] == ne0);
  if (!ok)
    fail(Status::bad_model, "tensor '" + t.name + "' has shape " + shape_str(t) + ", expected [" + std::to_string(ne0) +
                                (ne1 == 1 ? "" : ", " + std::to_string(ne1)) + "]");
}

Weight matrix(const GgufFile &f, const std::string &name, uint64_t cols, uint64_t rows) {
  const GgufTensor &t = require_tensor(f, name);
  check_shape(t, cols, rows);
  if (!matmul_type_supported(t.type)) {
    const char *tn = ggml_type_name(t.type);
    fail(Status::unsupported, std::string("unsupported tensor type ") + (tn ? tn : "?") + " in " + name);
  }
  Weight w;
  w.data = t.data;
  w.type = t.type;
  w.rows = static_cast<int64_t>(rows);
  w.cols = static_cast<int64_t>(cols);
  w.name = name;
  return w;
}

std::vector<float> vector_f32(const GgufFile &f, const std::string &name, uint64_t n) {
  const GgufTensor &t = require_tensor(f, name);
  check_shape(t, n, 1);
  std::vector<float> v(static_cast<size_t>(n));
  switch (static_cast<GgmlType>(t.type)) {
    case GgmlType::F32: std::memcpy(v.data(), t.data, static_cast<size_t>(n) * 4); break;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); v[i] = fp16_to_float(h); }
      break;
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); v[i] = bf16_to_float(h); }
      break;
    default: {
      const char *tn = ggml_type_name(t.type);
      fail(Status::unsupported, std::string("unsupported tensor type ") + (tn ? tn : "?") + " in " + name);
    }
  }
  return v;
}

int32_t hp_int(const GgufFile &f, const std::string &key, int64_t lo, int64_t hi, bool required, int64_t fallback) {
  int64_t v = required ? f.get_int_req(key) : f.get_int(key, fallback);
  if (v < lo || v > hi)
    fail(Status::bad_model, "metadata '" + key + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return static_cast<int32_t>(v);
}

uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const auto *b = static_cast<const uint8_t *>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}


// A vector tensor that may be absent (projection biases): empty when missing.
std::vector<float> optional_vector_f32(const GgufFile &f, const std::string &name, uint64_t n) {
  if (f.find_tensor(name) == nullptr) return {};
  std::vector<float> v = vector_f32(f, name, n);
  check_finite(v, name);
  return v;
}

// llama.cpp runs qwen2 in NEOX mode: its GGUF keeps Q/K rows (and biases) in Hugging Face's rotate-half order.
// infokv's kernels rotate adjacent pairs, so those rows are reordered into owned memory once at load.
Weight rows_to_pairs(const Weight &w, int64_t head_dim, std::vector<std::vector<uint8_t>> &owned) {
  const GgmlTypeTraits tr = ggml_type_traits(w.type);
  if (tr.block_elems == 0 || w.cols % tr.block_elems != 0)
    fail(Status::bad_model, "tensor '" + w.name + "' has rows that are not whole blocks of its type");
  const size_t row_bytes = static_cast<size_t>(w.cols / tr.block_elems) * tr.block_bytes;
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(w.rows));
  rope_rows_to_pairs(static_cast<const uint8_t *>(w.data), out.data(), w.rows, row_bytes, head_dim);
  owned.push_back(std::move(out));
  Weight r = w;
  r.data = owned.back().data();
  return r;
}

std::vector<float> vec_to_pairs(const std::vector<float> &v, int64_t head_dim) {
  if (v.empty()) return v;
  std::vector<float> out(v.size());
  rope_rows_to_pairs(reinterpret_cast<const uint8_t *>(v.data()), reinterpret_cast<uint8_t *>(out.data()),
                     static_cast<int64_t>(v.size()), sizeof(float), head_dim);
  return out;
}

// general.architecture and its hyperparameters.
void read_gguf_hparams(const GgufFile &f, HParams &hp) {
  hp.arch = f.get_string_req("general.architecture");
  if (hp.arch != "llama" && hp.arch != "qwen2")
    fail(Status::unsupported, "unsupported architecture '" + hp.arch + "' (infokv runs 'llama' and 'qwen2')");
  const std::string a = hp.arch + ".";
  hp.n_embd = hp_int(f, a + "embedding_length", 1, 1 << 16, true, 0);
  hp.n_layer = hp_int(f, a + "block_count", 1, 1024, true, 0);
  hp.n_head = hp_int(f, a + "attention.head_count", 1, 1024, true, 0);
  hp.n_head_kv = hp_int(f, a + "attention.head_count_kv", 1, hp.n_head, false, hp.n_head);
  hp.n_ff = hp_int(f, a + "feed_forward_length", 1, 1 << 20, true, 0);
  hp.n_ctx_train = hp_int(f, a + "context_length", 1, 1 << 24, false, 2048);
  if (hp.n_embd % hp.n_head != 0) fail(Status::bad_model, "embedding length is not a multiple of the head count");
  hp.head_dim = hp_int(f, a + "attention.key_length", 2, 1024, false, hp.n_embd / hp.n_head);
  if (hp_int(f, a + "attention.value_length", 2, 1024, false, hp.head_dim) != hp.head_dim)
    fail(Status::unsupported, "key and value head sizes differ");
  if (hp.head_dim % 2 != 0) fail(Status::bad_model, "head size must be even for RoPE");
  if (hp.n_head % hp.n_head_kv != 0) fail(Status::bad_model, "head count is not a multiple of the KV head count");
  double eps = f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
  double theta = f.get_float(a + "rope.freq_base", 10000.0);
  if (!(eps > 0 && eps < 1)) fail(Status::bad_model, "rms epsilon out of range");
  if (!(theta > 1 && theta < 1e12)) fail(Status::bad_model, "rope.freq_base out of range");
  hp.rms_eps = static_cast<float>(eps);
  hp.rope_theta = static_cast<float>(theta);
  parse_gguf_rope(f, hp.arch, hp.head_dim, &hp.rope);
}

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_hf(path);
  std::shared_ptr<Model> m(new Model());
  m->path_ = path;
  m->file_ = std::make_unique<GgufFile>(path);
  const GgufFile &f = *m->file_;
  m->name_ = f.get_string("general.name", "");
  m->chat_template_ = f.get_string("tokenizer.chat_template", "");
  m->file_bytes_ = f.file_size();
  for (const GgufTensor &t : f.tensors()) {
    const char *tn = ggml_type_name(t.type);
    ++m->tensor_types_[tn != nullptr ? tn : "?"];
  }
  read_gguf_hparams(f, m->hp_);
  HParams &hp = m->hp_;

  m->tok_ = Tokenizer::from_gguf(f);

  const GgufTensor &emb = require_tensor(f, "token_embd.weight");
  if (emb.n_dims != 2 || emb.ne[0] != static_cast<uint64_t>(hp.n_embd))
    fail(Status::bad_model, "tensor 'token_embd.weight' has shape " + shape_str(emb) + ", expected [" + std::to_string(hp.n_embd) + ", n_vocab]");
  if (emb.ne[1] > (1u << 24)) fail(Status::bad_model, "vocabulary too large");
  hp.n_vocab = static_cast<int32_t>(emb.ne[1]);
  if (m->tok_.n_vocab() != hp.n_vocab)
    fail(Status::bad_model, "tokenizer has " + std::to_string(m->tok_.n_vocab()) + " tokens but token_embd.weight has " +
                                std::to_string(hp.n_vocab) + " rows");
  m->tok_embd_ = matrix(f, "token_embd.weight", static_cast<uint64_t>(hp.n_embd), static_cast<uint64_t>(hp.n_vocab));
  if (f.find_tensor("output.weight") != nullptr) {
    m->output_ = matrix(f, "output.weight", static_cast<uint64_t>(hp.n_embd), static_cast<uint64_t>(hp.n_vocab));
  } else {
    m->output_ = m->tok_embd_;
    m->tied_ = true;
  }
  check_finite_rows(m->tok_embd_);
  if (!m->tied_) check_finite_rows(m->output_);
  m->out_norm_ = vector_f32(f, "output_norm.weight", static_cast<uint64_t>(hp.n_embd));
  check_finite(m->out_norm_, "output_norm.weight");

  const uint64_t d = static_cast<uint64_t>(hp.n_embd), hd = static_cast<uint64_t>(hp.head_dim);
  const uint64_t q_dim = hd * static_cast<uint64_t>(hp.n_head), kv_dim = hd * static_cast<uint64_t>(hp.n_head_kv);
  const uint64_t ff = static_cast<uint64_t>(hp.n_ff);
  const bool neox = hp.arch == "qwen2";
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights &L = m->layers_[static_cast<size_t>(l)];
    L.attn_norm = vector_f32(f, p + "attn_norm.weight", d);
    check_finite(L.attn_norm, p + "attn_norm.weight");
    L.wq = matrix(f, p + "attn_q.weight", d, q_dim);
    L.wk = matrix(f, p + "attn_k.weight", d, kv_dim);
    L.wv = matrix(f, p + "attn_v.weight", d, kv_dim);
    L.wo = matrix(f, p + "attn_output.weight", q_dim, d);
    L.bq = optional_vector_f32(f, p + "attn_q.bias", q_dim);
    L.bk = optional_vector_f32(f, p + "attn_k.bias", kv_dim);
    L.bv = optional_vector_f32(f, p + "attn_v.bias", kv_dim);
    L.bo = optional_vector_f32(f, p + "attn_output.bias", d);
    if (neox) {
      L.wq = rows_to_pairs(L.wq, hp.head_dim, m->owned_);
      L.wk = rows_to_pairs(L.wk, hp.head_dim, m->owned_);
      L.bq = vec_to_pairs(L.bq, hp.head_dim);
      L.bk = vec_to_pairs(L.bk, hp.head_dim);
    }
    L.ffn_norm = vector_f32(f, p + "ffn_norm.weight", d);
    check_finite(L.ffn_norm, p + "ffn_norm.weight");
    L.w_gate = matrix(f, p + "ffn_gate.weight", d, ff);
    L.w_up = matrix(f, p + "ffn_up.weight", d, ff);
    L.w_down = matrix(f, p + "ffn_down.weight", ff, d);
  }

  uint64_t h = 1469598103934665603ull;
  for (const GgufTensor &t : f.tensors()) {
    m->n_params_ += t.n_elements;
    m->weight_bytes_ += t.n_bytes;
    h = fnv1a(h, t.name.data(), t.name.size());
    h = fnv1a(h, &t.type, sizeof(t.type));
    h = fnv1a(h, t.ne, sizeof(t.ne));
    // Hashing every byte of a multi-GB model would slow every load; 64 evenly spaced 64-byte samples per tensor
    // tell apart any two real checkpoints.
    const uint64_t step = t.n_bytes / 64 + 1;
    for (uint64_t off = 0; off < t.n_bytes; off += step) h = fnv1a(h, t.data + off, static_cast<size_t>(std::min<uint64_t>(64, t.n_bytes - off)));
  }
  m->weights_fp_ = h;
  return m;
}

const void *Model::derived(const Weight &w, size_t bytes, const std::function<void(void *)> &fill) const {
  std::lock_guard<std::mutex> lock(derived_mu_);
  auto it = derived_.find(w.data);
  if (it != derived_.end()) return it->second.get();
  void *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) fail(Status::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes for " + w.name);
  std::unique_ptr<void, FreeBytes> owned(p);
  fill(p);
  derived_.emplace(w.data, std::move(owned));
  const GgmlTypeTraits tt = ggml_type_traits(w.type);
  if (tt.block_elems > 0) {
    const size_t n = static_cast<size_t>(w.rows * w.cols) / tt.block_elems * tt.block_bytes;
    bool ours = file_ != nullptr && file_->mapping().release(w.data, n);
    for (size_t i = 0; i < shards_.size() && !ours; ++i) ours = shards_[i]->mapping().release(w.data, n);
  }
  return p;
}

void Model::check_made_with(const std::string &what, uint64_t weights_fp, uint64_t tokenizer_fp) const {
  const auto hex = [](uint64_t v) {
    char b[20];
    std::snprintf(b, sizeof b, "%016" PRIx64, v);
    return std::string(b);
  };
  if (weights_fp != weights_fingerprint())
    fail(Status::wrong_model, what + " was made with another model (weights fingerprint " + hex(weights_fp) +
                                  ", this model " + hex(weights_fingerprint()) + ")");
  if (tokenizer_fp != tokenizer().fingerprint())
    fail(Status::wrong_model, what + " was made with another tokenizer (fingerprint " + hex(tokenizer_fp) +
                                  ", this model " + hex(tokenizer().fingerprint()) + ")");
}

}  // namespace infokv
