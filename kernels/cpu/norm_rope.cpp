// RMSNorm and rotary position embedding (GGUF "llama" convention: adjacent pairs).
#include <cmath>
#include <vector>

#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

void rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps) {
  for (int64_t t = 0; t < n; ++t) {
    const float *xr = x + t * d;
    float *o = out + t * d;
    double ss = 0;  // double keeps the sum exact enough for long rows of large activations
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * scale * w[i];
  }
}

void rope_angles(float *cs, const int32_t *pos, int64_t n, int64_t half, const double *inv_freq) {
  for (int64_t t = 0; t < n; ++t) {
    const double p = pos[t];
    for (int64_t i = 0; i < half; ++i) {
      // the angle is formed in double: at positions in the tens of thousands float loses the low bits
      const double ang = p * inv_freq[i];
      cs[(t * half + i) * 2] = static_cast<float>(std::cos(ang));
      cs[(t * half + i) * 2 + 1] = static_cast<float>(std::sin(ang));
    }
  }
}

void rope_apply(float *x, const float *cs, int64_t n, int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float c = cs[(t * half + i) * 2], s = cs[(t * half + i) * 2 + 1];
      for (int64_t h = 0; h < n_heads; ++h) {
        float *v = x + (t * n_heads + h) * head_dim + 2 * i;
        const float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
      }
    }
}

void rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq) {
  std::vector<float> cs(static_cast<size_t>(n * head_dim));  // n x half x {cos, sin}
  rope_angles(cs.data(), pos, n, head_dim / 2, inv_freq);
  rope_apply(x, cs.data(), n, n_heads, head_dim);
}

}  // namespace cpu
}  // namespace infokv
