// SwiGLU, residual add, embedding row lookup.
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "gguf/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "util/fp16.hpp"

namespace infokv {

const char *kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::f32: return "f32";
    case KvDtype::f16: return "f16";
    case KvDtype::bf16: return "bf16";
  }
  return "unknown";
}

namespace cpu {

void swiglu(float *out, const float *gate, const float *up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

bool get_row(float *out, const void *emb, uint32_t type, int64_t row, int64_t d) {
  const GgmlTypeTraits tr = ggml_type_traits(type);
  if (tr.name == nullptr || tr.block_elems == 0 || d % tr.block_elems != 0) return false;
  const size_t row_bytes = static_cast<size_t>(d / tr.block_elems) * tr.block_bytes;
  return dequantize(out, static_cast<const uint8_t *>(emb) + static_cast<size_t>(row) * row_bytes, type, d);
}

double topk_entropy(const float *logits, int32_t n, int32_t top_k) {
  // Only the top_k largest logits take part; find them with a threshold from a partial selection.
  if (n <= 0) return 0.0;
  int32_t k = (top_k <= 0 || top_k > n) ? n : top_k;
  float mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
  float thr = -INFINITY;
  if (k < n) {
    // k-th largest by nth_element on a copy; n is the vocabulary size, this runs once per position
    static thread_local std::vector<float> tmp;
    tmp.assign(logits, logits + n);
    std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), [](float a, float b) { return a > b; });
    thr = tmp[static_cast<size_t>(k - 1)];
  }
  double z = 0, zl = 0;
  int32_t above = 0;
  for (int32_t i = 0; i < n; ++i) above += logits[i] > thr;
  int32_t ties_allowed = k - above;  // equal-to-threshold values admitted to make exactly k
  for (int32_t i = 0; i < n; ++i) {
    bool in = logits[i] > thr || (logits[i] == thr && ties_allowed-- > 0);
    if (!in) continue;
    double l = static_cast<double>(logits[i]) - mx;
    double e = std::exp(l);
    z += e;
    zl += e * l;
  }
  // H = log Z - E[l]
  return std::log(z) - zl / z;
}

}  // namespace cpu
}  // namespace infokv
