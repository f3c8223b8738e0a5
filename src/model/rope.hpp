// How a model turns a position into rotation angles: the base frequency (rope_theta) and the scalings that stretch
// a model past the context it was trained on. Every kind reduces to one inverse frequency per rotated pair, which
// is what the rope kernel takes, so the kernels know nothing about the kinds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace infokv {

class JsonValue;
class GgufFile;

enum class RopeScalingType {
  none,
  linear,   // positions divided by `factor` (Hugging Face "linear", GGUF rope.scaling.type = linear)
  llama3,   // Llama 3.1+: low frequencies divided by `factor`, high ones kept, a smooth ramp between
  dynamic,  // NTK-aware: the base grows with the sequence once it passes original_ctx (Hugging Face "dynamic")
  factors,  // per-pair divisors stored in the file (GGUF rope_freqs.weight: how llama.cpp stores llama3 scaling)
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_ctx = 0;                              // llama3, dynamic: the pre-training context
  std::vector<float> freq_factors;                       // factors: [head_dim / 2]
};

// The name of a type as Hugging Face spells it ("factors" for per-pair divisors from a GGUF).
const char *rope_scaling_name(RopeScalingType t);

// The inverse frequency of each rotated pair i in [0, head_dim / 2) for a forward pass whose longest position is
// `max_pos` (only the dynamic type depends on it): theta^(-2i/head_dim), then scaled. Computed in double.
std::vector<double> rope_inv_freq(double theta, int32_t head_dim, const RopeScaling &s, int64_t max_pos);

// Whether the frequencies change with the positions of the forward pass (then the forward pass recomputes them).
inline bool rope_depends_on_positions(const RopeScaling &s) { return s.type == RopeScalingType::dynamic; }

// One line for `infokv info`: "llama3 (factor 32, low 1, high 4, original context 8192)", "none".
std::string rope_scaling_describe(const RopeScaling &s);

// A Hugging Face config.json's scaling: `rope_scaling` (Hub checkpoints) or `rope_parameters` (transformers 5),
// and the base frequency `rope_theta` (top level, or inside rope_parameters). `max_position_embeddings` is the
// context the config declares. Throws Error(unsupported) naming a type infokv does not implement (yarn, longrope,
// ...), Error(bad_model) for missing or out-of-range fields.
void parse_hf_rope(const JsonValue &cfg, int64_t max_position_embeddings, double *theta, RopeScaling *out);

// Reorders the rows of a Q or K projection (each of `rows / head_dim` heads) from the "rotate half" layout
// (Hugging Face, and GGUF architectures llama.cpp runs in NEOX mode such as qwen2), where pair i of a head is rows
// (i, i + head_dim/2), to adjacent pairs (2i, 2i + 1), the layout infokv's rope kernels rotate. Rows are moved as
// whole byte runs of `row_bytes`, so quantised rows move too. dst must not alias src.
void rope_rows_to_pairs(const uint8_t *src, uint8_t *dst, int64_t rows, size_t row_bytes, int64_t head_dim);

// A GGUF's scaling for architecture prefix `arch` ("llama."): rope.scaling.type/factor/original_context_length and
// the rope_freqs.weight tensor. Throws as parse_hf_rope.
void parse_gguf_rope(const GgufFile &f, const std::string &arch, int32_t head_dim, RopeScaling *out);

}  // namespace infokv
