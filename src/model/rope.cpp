#include "model/rope.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "gguf/gguf.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

const char *rope_scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::none: return "none";
    case RopeScalingType::linear: return "linear";
    case RopeScalingType::llama3: return "llama3";
    case RopeScalingType::dynamic: return "dynamic";
    case RopeScalingType::factors: return "factors";
  }
  return "?";
}

std::vector<double> rope_inv_freq(double theta, int32_t head_dim, const RopeScaling &s, int64_t max_pos) {
  const int32_t half = head_dim / 2;
  const double d = static_cast<double>(head_dim);
  double base = theta;
  if (s.type == RopeScalingType::dynamic && max_pos + 1 > s.original_ctx && s.original_ctx > 0) {
    // transformers' _compute_dynamic_ntk_parameters with seq_len = the longest position + 1.
    const double seq_len = static_cast<double>(max_pos + 1);
    base = theta * std::pow(s.factor * seq_len / static_cast<double>(s.original_ctx) - (s.factor - 1.0), d / (d - 2.0));
  }
  std::vector<double> f(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    double inv = std::pow(base, -2.0 * i / d);
    if (!s.freq_factors.empty()) inv /= static_cast<double>(s.freq_factors[static_cast<size_t>(i)]);
    if (s.type == RopeScalingType::linear) {
      inv /= s.factor;
    } else if (s.type == RopeScalingType::llama3) {
      // transformers' _compute_llama3_parameters: wavelengths longer than the original context / low_freq_factor
      // are stretched by `factor`, shorter than / high_freq_factor kept, and the band between interpolated.
      const double pi = 3.14159265358979323846;
      const double ctx = static_cast<double>(s.original_ctx);
      const double low_wavelen = ctx / s.low_freq_factor, high_wavelen = ctx / s.high_freq_factor;
      const double wavelen = 2.0 * pi / inv;
      if (wavelen > low_wavelen) {
        inv /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1.0 - smooth) * inv / s.factor + smooth * inv;
      }
    }
    f[static_cast<size_t>(i)] = inv;
  }
  return f;
}

std::string rope_scaling_describe(const RopeScaling &s) {
  std::ostringstream o;
  o << rope_scaling_name(s.type);
  switch (s.type) {
    case RopeScalingType::none: break;
    case RopeScalingType::linear: o << " (factor " << s.factor << ")"; break;
    case RopeScalingType::llama3:
      o << " (factor " << s.factor << ", low " << s.low_freq_factor << ", high " << s.high_freq_factor << ", original context "
        << s.original_ctx << ")";
      break;
    case RopeScalingType::dynamic: o << " (factor " << s.factor << ", original context " << s.original_ctx << ")"; break;
    case RopeScalingType::factors: o << " (" << s.freq_factors.size() << " per-pair factors from the file)"; break;
  }
  if (s.type != RopeScalingType::factors && !s.freq_factors.empty()) o << " with " << s.freq_factors.size() << " per-pair factors";
  return o.str();
}

void rope_rows_to_pairs(const uint8_t *src, uint8_t *dst, int64_t rows, size_t row_bytes, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < rows / head_dim; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * head_dim + 2 * i + j, from = h * head_dim + j * half + i;
        std::memcpy(dst + static_cast<size_t>(to) * row_bytes, src + static_cast<size_t>(from) * row_bytes, row_bytes);
      }
}

namespace {

double json_num(const JsonValue &obj, const char *key, const std::string &where, bool required, double fallback) {
  const JsonValue *v = obj.find(key);
  if (v == nullptr || v->is_null()) {
    if (required) fail(Status::bad_model, "config.json " + where + " has no '" + key + "'");
    return fallback;
  }
  if (!v->is_number() || !std::isfinite(v->as_number()))
    fail(Status::bad_model, "config.json " + where + " '" + key + "' is not a number");
  return v->as_number();
}

void check_factor(double f, const std::string &where) {
  if (!(f >= 1.0 && f <= 1e6)) fail(Status::bad_model, where + " factor must be in [1, 1e6]");
}

}  // namespace

void parse_hf_rope(const JsonValue &cfg, int64_t max_position_embeddings, double *theta, RopeScaling *out) {
  *out = RopeScaling();
  // transformers 5 writes rope_parameters (with rope_theta inside); Hub checkpoints carry rope_scaling and a
  // top-level rope_theta. rope_scaling: null means none.
  const JsonValue *rs = cfg.find("rope_scaling");
  std::string where = "rope_scaling";
  if (rs == nullptr || rs->is_null()) {
    rs = cfg.find("rope_parameters");
    where = "rope_parameters";
  }
  *theta = json_num(cfg, "rope_theta", "", false, 10000.0);
  if (rs == nullptr || rs->is_null()) return;
  if (!rs->is_object()) fail(Status::bad_model, "config.json '" + where + "' is not an object");
  if (where == "rope_parameters") *theta = json_num(*rs, "rope_theta", where, false, *theta);
  const JsonValue *ty = rs->find("rope_type");
  if (ty == nullptr) ty = rs->find("type");
  if (ty == nullptr || !ty->is_string()) fail(Status::bad_model, "config.json " + where + " has no rope_type");
  const std::string kind = ty->as_string();
  if (kind == "default") return;
  if (kind == "linear") {
    out->type = RopeScalingType::linear;
  } else if (kind == "dynamic") {
    out->type = RopeScalingType::dynamic;
  } else if (kind == "llama3") {
    out->type = RopeScalingType::llama3;
  } else {
    fail(Status::unsupported, "RoPE scaling '" + kind + "' (config.json " + where +
                                  ") is not implemented; infokv runs default, linear, dynamic and llama3");
  }
  out->factor = json_num(*rs, "factor", where, true, 1.0);
  check_factor(out->factor, "config.json " + where);
  out->original_ctx = max_position_embeddings;
  if (out->type == RopeScalingType::llama3) {
    out->low_freq_factor = json_num(*rs, "low_freq_factor", where, true, 1.0);
    out->high_freq_factor = json_num(*rs, "high_freq_factor", where, true, 4.0);
    const double orig = json_num(*rs, "original_max_position_embeddings", where, true, 0);
    if (!(orig >= 1 && orig <= (1 << 24) && orig == std::floor(orig)))
      fail(Status::bad_model, "config.json " + where + " original_max_position_embeddings must be a positive integer");
    out->original_ctx = static_cast<int64_t>(orig);
    if (!(out->low_freq_factor > 0 && out->high_freq_factor > out->low_freq_factor && out->high_freq_factor < 1e6))
      fail(Status::bad_model, "config.json " + where + " needs 0 < low_freq_factor < high_freq_factor");
  }
}

void parse_gguf_rope(const GgufFile &f, const std::string &arch, int32_t head_dim, RopeScaling *out) {
  *out = RopeScaling();
  const std::string a = arch + ".";
  const int64_t n_rot = f.get_int(a + "rope.dimension_count", head_dim);
  if (n_rot != head_dim)
    fail(Status::unsupported, "partial rotary embeddings (rope.dimension_count " + std::to_string(n_rot) + " of head size " +
                                  std::to_string(head_dim) + ") are not implemented");
  std::string kind = f.get_string(a + "rope.scaling.type", "none");
  double factor = f.get_float(a + "rope.scaling.factor", 0.0);
  // Older files: rope.scale_linear alone means linear scaling.
  if (f.find(a + "rope.scale_linear") != nullptr && f.find(a + "rope.scaling.type") == nullptr) {
    factor = f.get_float(a + "rope.scale_linear", 1.0);
    kind = factor != 1.0 ? "linear" : "none";
  }
  if (kind == "linear") {
    // llama.cpp treats a factor of 0 as none.
    if (factor == 0.0 || factor == 1.0) {
      kind = "none";
    } else {
      check_factor(factor, "GGUF rope.scaling");
      out->type = RopeScalingType::linear;
      out->factor = factor;
    }
  } else if (kind != "none") {
    fail(Status::unsupported, "RoPE scaling '" + kind + "' (GGUF " + a + "rope.scaling.type) is not implemented; infokv runs none, linear and per-pair factors (rope_freqs.weight)");
  }
  if (const GgufTensor *t = f.find_tensor("rope_freqs.weight"); t != nullptr) {
    const uint64_t half = static_cast<uint64_t>(head_dim) / 2;
    if (t->n_dims != 1 || t->ne[0] != half)
      fail(Status::bad_model, "tensor 'rope_freqs.weight' must have " + std::to_string(half) + " elements (head size / 2)");
    if (t->type != static_cast<uint32_t>(GgmlType::F32)) fail(Status::unsupported, "tensor 'rope_freqs.weight' must be F32");
    out->freq_factors.resize(half);
    std::memcpy(out->freq_factors.data(), t->data, half * 4);
    for (float v : out->freq_factors)
      if (!(v > 0 && std::isfinite(v))) fail(Status::bad_model, "tensor 'rope_freqs.weight' holds a factor that is not positive and finite");
    if (out->type == RopeScalingType::none) out->type = RopeScalingType::factors;
  }
  out->original_ctx = f.get_int(a + "rope.scaling.original_context_length", 0);
}

}  // namespace infokv
