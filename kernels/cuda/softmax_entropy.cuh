// Top-k entropy of logits and the representation change of hidden states: the InfoKV side channels
// (kernels; launchers in softmax_entropy.cu). One block per row.
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {


// Order-preserving map of a float to an unsigned key (larger float, larger key).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Counts elements with key >= k, block-wide (as float: exact below 2^24, vocabularies are smaller).
__device__ __forceinline__ int32_t count_ge(const float *xr, int32_t n, uint32_t k, float *sh) {
  float c = 0;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) c += order_key(xr[i]) >= k ? 1.0f : 0.0f;
  return static_cast<int32_t>(block_sum(c, sh));
}

// out: [n_rows] entropy in nats of softmax over the top_k largest logits of each row (ties at the threshold
// admitted up to exactly k, like the CPU twin). The k-th largest value is found by bisection on the key space:
// 32 counting passes, no sort and no scratch memory. logits: [n_rows, n]
__global__ void topk_entropy_kernel(double *out, const float *logits, int32_t n, int32_t k) {
  __shared__ float sh[32];
  const float *xr = logits + static_cast<int64_t>(blockIdx.x) * n;
  float mx = -INFINITY;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, xr[i]);
  mx = block_max(mx, sh);
  uint32_t thr_key = 0;       // all elements when k == n
  int32_t ties_allowed = 0, above = n;
  if (k < n) {
    // largest key T with count(key >= T) >= k: that is the k-th largest element's key
    uint32_t lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      // upper midpoint in 64 bits: hi - lo + 1 overflows 32 bits on the first step
      const uint32_t mid = lo + static_cast<uint32_t>((static_cast<uint64_t>(hi) - lo + 1) / 2);
      if (count_ge(xr, n, mid, sh) >= k) lo = mid; else hi = mid - 1;
    }
    thr_key = lo;
    above = thr_key == 0xffffffffu ? 0 : count_ge(xr, n, thr_key + 1, sh);
    ties_allowed = k - above;
  }
  // H = log Z - E[l], l = x - max; sums in float (per thread and across the block; the CPU twin uses double:
  // the kernel tests bound the difference), combined with the threshold ties in double.
  float z = 0, zl = 0;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const uint32_t key = order_key(xr[i]);
    if (k < n && key <= thr_key) continue;  // ties at the threshold are added below
    const float l = xr[i] - mx;
    const float e = expf(l);
    z += e;
    zl += e * l;
  }
  z = block_sum(z, sh);
  zl = block_sum(zl, sh);
  if (threadIdx.x == 0) {
    double Z = z, ZL = zl;
    if (k < n && ties_allowed > 0) {
      // the threshold value from its key
      const uint32_t u = (thr_key & 0x80000000u) ? (thr_key & 0x7fffffffu) : ~thr_key;
      const double l = static_cast<double>(__uint_as_float(u)) - mx;
      Z += ties_allowed * exp(l);
      ZL += ties_allowed * exp(l) * l;
    }
    out[blockIdx.x] = log(Z) - ZL / Z;
  }
}

// One block per (l, t): out[l * n + t] = 1 - cos(hidden[l, t], hidden[n_layer - 1, t]), dot products in double.
// hidden: [n_layer, n, d]; out: [n_layer, n]. blockDim.x == 256.
__global__ void rep_change_kernel(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d) {
  __shared__ double sh[3][256];
  const int64_t row = blockIdx.x;  // l * n + t
  const float *a = hidden + row * d;
  const float *b = hidden + ((n_layer - 1) * n + row % n) * d;
  double ab = 0, aa = 0, bb = 0;
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    const double x = a[e], y = b[e];
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  sh[0][threadIdx.x] = ab;
  sh[1][threadIdx.x] = aa;
  sh[2][threadIdx.x] = bb;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      for (int c = 0; c < 3; ++c) sh[c][threadIdx.x] += sh[c][threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double c = (sh[1][0] > 0 && sh[2][0] > 0) ? sh[0][0] / sqrt(sh[1][0] * sh[2][0]) : 1.0;
    out[row] = static_cast<float>(1.0 - c);
  }
}

}  // namespace cuda
}  // namespace infokv
