// RMSNorm and RoPE kernels (templates; launchers in norm_rope.cu).
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {

// One block per row. x, out: [n, d]; w: [d].
__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int64_t d, float eps) {
  __shared__ float sh[32];
  const float *xr = x + blockIdx.x * d;
  float *o = out + blockIdx.x * d;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, sh);
  const float scale = rsqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

// One thread per (token, pair); the angle is formed in double as in the CPU twin: at positions in the tens of
// thousands float loses the low bits. x: [n, n_heads, head_dim]; pos: [n]; inv_freq: [head_dim / 2].
__global__ void rope_kernel(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq) {
  const int64_t half = head_dim / 2;
  const int64_t total = n * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / half, i = idx % half;
    double s, c;
    sincos(static_cast<double>(pos[t]) * inv_freq[i], &s, &c);
    const float cf = static_cast<float>(c), sf = static_cast<float>(s);
    for (int64_t h = 0; h < n_heads; ++h) {
      float *v = x + (t * n_heads + h) * head_dim + 2 * i;
      const float a = v[0], b = v[1];
      v[0] = a * cf - b * sf;
      v[1] = a * sf + b * cf;
    }
  }
}

}  // namespace cuda
}  // namespace infokv
