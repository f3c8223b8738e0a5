// RMSNorm and rotary position embedding (GGUF "llama" convention: adjacent pairs).
#include <cmath>

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

void rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const double p = pos[t];
    for (int64_t i = 0; i < half; ++i) {
      // the angle is formed in double: at positions in the tens of thousands float loses the low bits
      double ang = p * inv_freq[i];
      float c = static_cast<float>(std::cos(ang)), s = static_cast<float>(std::sin(ang));
      for (int64_t h = 0; h < n_heads; ++h) {
        float *v = x + (t * n_heads + h) * head_dim + 2 * i;
        float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = a * s + b * c;
      }
    }
  }
}

}  // namespace cpu
}  // namespace infokv
