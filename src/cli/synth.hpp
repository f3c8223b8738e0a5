// infokv synth, shared by its two output formats: the presets, the tensor list and the pure function of
// (seed, tensor, element) that gives each weight its value, so a GGUF and a Hugging Face checkpoint written from
// the same (preset, dtype, seed) hold the same model.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/safetensors.hpp"

namespace infokv {
namespace cli {
namespace synth {

struct Preset {
  const char *name;
  const char *arch;        // GGUF general.architecture: "llama" or "qwen2"
  const char *hf_class;    // config.json architectures[0]
  const char *model_type;  // config.json model_type
  int32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_theta, rms_eps;
  bool tied;
  bool qkv_bias;  // Qwen2: biases on the q/k/v projections
  // Llama 3.1+ "llama3" RoPE scaling; factor 0: none.
  float rope_factor, rope_low_freq, rope_high_freq;
  int32_t rope_original_ctx;
};

// The preset called `name`, or Error(invalid_argument) listing the presets.
const Preset &find_preset(const std::string &name);

// The names of all presets, comma-separated (for help text).
std::string preset_names();

// One tensor, in the order the GGUF holds them (its position keys its random stream). Values are defined on the
// GGUF layout: element (row, col) of a matrix is weight(key, row * cols + col).
struct Tensor {
  std::string gguf_name, hf_name;  // hf_name empty: GGUF only (rope_freqs.weight)
  uint64_t rows = 0, cols = 0;     // cols == 0: a vector
  float sd = 0;                    // standard deviation; 0: a norm weight (all ones)
  int64_t rope_head_dim = 0;       // > 0: attn_q/attn_k (and biases), whose rows the layouts order differently in a head
  std::vector<float> values;       // when not empty: the tensor's values (f32), not random
  uint64_t n_elements() const { return rows * (cols ? cols : 1); }
};

std::vector<Tensor> tensors(const Preset &p);

// The element of the canonical (adjacent-pairs) layout that element `e` of tensor `t` holds when stored in the
// rotate-half layout (Hugging Face; GGUF qwen2). Identity for tensors without rope_head_dim.
uint64_t rotate_half_source(const Tensor &t, uint64_t e);

// Element `e` of tensor `index` of `ts` as stored in the given layout.
float element(const std::vector<Tensor> &ts, size_t index, uint64_t seed, uint64_t e, bool rotate_half);

// The key of tensor `index`'s random stream.
uint64_t tensor_key(uint64_t seed, size_t index);

// Element `e` of a tensor with standard deviation `sd` (uniform on [-sd*sqrt(3), sd*sqrt(3)]); 1 when sd is 0.
float weight(uint64_t key, float sd, uint64_t e);

// Stores `v` at `out` as dtype F32, F16 or BF16.
void store(float v, StDtype dtype, uint8_t *out);

// Writes `dir`/model.safetensors, config.json, tokenizer.json and tokenizer_config.json: the model `tensors`
// describes under Hugging Face's names and layout for the preset's class (Llama, Mistral or Qwen2ForCausalLM), with a byte-level BPE vocabulary of the
// preset's size. `dir` is created if needed; an existing directory may hold only files of these names.
// Returns the bytes of tensor data. Throws Error(invalid_argument) or Error(io).
uint64_t write_hf_checkpoint(const std::string &dir, const Preset &p, StDtype dtype, uint64_t seed,
                             const std::function<void(uint64_t, uint64_t)> &progress);

}  // namespace synth
}  // namespace cli
}  // namespace infokv
