// A Llama-family decoder's hyper-parameters and weights, loaded from GGUF (weights stay in the mapping).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <map>

#include "gguf/gguf.hpp"
#include "model/rope.hpp"
#include "model/safetensors.hpp"
#include "tokenizer/tokenizer.hpp"

namespace infokv {

struct HParams {
  std::string arch;  // "llama" or "qwen2" (GGUF general.architecture; Hugging Face checkpoints map to these)
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;     // the context the model declares
  int32_t sliding_window = 0;  // > 0: the model was trained to attend to this many recent tokens only (reported)
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope;  // how positions beyond the training context are reached
};

// A weight matrix [rows, cols] (rows = outputs) in its file type; data points into the mapping.
struct Weight {
  const void *data = nullptr;
  uint32_t type = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::string name;
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  Weight wq, wk, wv, wo;         // [n_head*hd, n_embd], [n_kv*hd, n_embd] x2, [n_embd, n_head*hd]
  std::vector<float> bq, bk, bv, bo;  // projection biases (qwen2: q, k, v); empty when the model has none
  std::vector<float> ffn_norm;   // [n_embd]
  Weight w_gate, w_up, w_down;   // [n_ff, n_embd] x2, [n_embd, n_ff]
};

class Model {
 public:
  // Loads a GGUF file, or a Hugging Face checkpoint directory (config.json of a LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM, model.safetensors
  // or sharded *.safetensors with model.safetensors.index.json, tokenizer.json; f32/f16/bf16 weights).
  // Throws Error(io|bad_model|unsupported) with a message naming the problem.
  static std::shared_ptr<const Model> load(const std::string &path);
  // Only the tokenizer of what load() would open, without reading or checking weights: a GGUF file's
  // tokenizer.ggml.* metadata, or a directory's tokenizer.json (+ tokenizer_config.json and config.json when present;
  // a tokenizer-only directory is enough). Throws as load() does.
  static Tokenizer load_tokenizer(const std::string &path);

  // "gguf" or "safetensors".
  const std::string &format() const { return format_; }
  bool has_gguf() const { return file_ != nullptr; }
  const std::string &name() const { return name_; }
  // The chat template text (tokenizer.chat_template or tokenizer_config.json's chat_template); may be empty.
  const std::string &chat_template() const { return chat_template_; }
  // Tensor count per element type name ("Q4_1": 210, ...), and the bytes of the model's files.
  const std::map<std::string, int> &tensor_types() const { return tensor_types_; }
  uint64_t file_bytes() const { return file_bytes_; }

  const HParams &hparams() const { return hp_; }
  const Tokenizer &tokenizer() const { return tok_; }
  const GgufFile &gguf() const { return *file_; }  // only when has_gguf()
  const std::string &path() const { return path_; }
  const Weight &token_embd() const { return tok_embd_; }
  const Weight &output() const { return output_; }  // the embedding itself when tied
  bool tied_output() const { return tied_; }
  const std::vector<float> &output_norm() const { return out_norm_; }
  const LayerWeights &layer(int32_t l) const { return layers_[static_cast<size_t>(l)]; }
  // 64-bit fingerprint of the weights (hash of shapes, types and a sample of the bytes of every tensor).
  uint64_t weights_fingerprint() const { return weights_fp_; }
  // Throws Error(wrong_model) naming `what` (e.g. "snapshot") unless the weights and tokenizer fingerprints it was
  // made with are this model's.
  void check_made_with(const std::string &what, uint64_t weights_fp, uint64_t tokenizer_fp) const;
  uint64_t n_params() const { return n_params_; }
  uint64_t weight_bytes() const { return weight_bytes_; }

  // A copy of weight w rearranged for a backend (the CPU's grouped f16/bf16 layout): `bytes` bytes, 64-byte aligned,
  // written by fill(dst) on the first request for w and kept for the model's lifetime, so every session shares one.
  // Thread-safe. Once the copy is made, w's own pages are given back to the kernel where they lie in a file mapping
  // (w.data still reads the same bytes: the pages come back from the file). Throws Error(out_of_memory).
  const void *derived(const Weight &w, size_t bytes, const std::function<void(void *)> &fill) const;

 private:
  Model() = default;
  static std::shared_ptr<const Model> load_hf(const std::string &dir);
  std::string path_;
  std::string format_ = "gguf";
  std::string name_;
  std::string chat_template_;
  std::map<std::string, int> tensor_types_;
  uint64_t file_bytes_ = 0;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::vector<uint8_t>> owned_;  // weights rearranged at load (HF q/k rows)
  std::unique_ptr<GgufFile> file_;
  HParams hp_;
  Tokenizer tok_;
  Weight tok_embd_, output_;
  bool tied_ = false;
  std::vector<float> out_norm_;
  std::vector<LayerWeights> layers_;
  uint64_t weights_fp_ = 0;
  uint64_t n_params_ = 0;
  uint64_t weight_bytes_ = 0;
  struct FreeBytes {
    void operator()(void *p) const noexcept { std::free(p); }
  };
  mutable std::mutex derived_mu_;
  mutable std::map<const void *, std::unique_ptr<void, FreeBytes>> derived_;
};

}  // namespace infokv
