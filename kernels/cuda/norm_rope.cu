#include <cmath>

#include "kernels/cuda/norm_rope.cuh"

namespace infokv {
namespace cuda {

Status rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps, Stream *stream) {
  if (n < 0 || d <= 0 || !(eps >= 0)) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  if (n > 0x7fffffffLL) return Status::unsupported;
  const int threads = d >= 1024 ? 1024 : (d >= 256 ? 256 : 64);
  rmsnorm_kernel<<<static_cast<unsigned>(n), threads, 0, raw_stream(stream)>>>(out, x, w, d, eps);
  return launch_status();
}

Status rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq,
            Stream *stream) {
  if (n < 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || inv_freq == nullptr) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  const int threads = 256;
  rope_kernel<<<grid_for(n * (head_dim / 2), threads), threads, 0, raw_stream(stream)>>>(x, pos, n, n_heads, head_dim, inv_freq);
  return launch_status();
}

}  // namespace cuda
}  // namespace infokv
