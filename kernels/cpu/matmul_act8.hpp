// Quantised weights times integer activations: the decode products (fewer than 4 tokens) of Q4_0, Q4_1, Q5_0,
// Q8_0, Q4_K and Q6_K weights with each token's x rounded to 8-bit integers, as llama.cpp computes them (one byte
// plane, int8), or to 16-bit precision carried as two byte planes (int16, the default). x is quantised once per
// product (per 32 values for the 32-element types, as ggml's q8_0; per 256 for the K types, as q8_K: d = max|x| /
// 127, q = round-to-nearest-even(x / d)), and every block's integer dot product is exact (AVX-512 VNNI's
// vpdpbusd); only the per-block scales are floats. Whether decode uses it is cpu_activations() (cpu_features.hpp);
// the f32 path stays the exact reference.
#pragma once
#include <cstdint>
#include <vector>

namespace infokv {
class ThreadPool;
namespace cpu {

// One token's activations quantised for weights of a given type (act8_quantize). With one plane each value is
// d * q (q in -127..127, d = max|x| / 127 per block); with two, d * (q + q2 / 256), q2 the rounded remainder in
// -127..127: 16-bit precision, the integer products then summing 256 * dot(w, q) + dot(w, q2).
struct Act8 {
  int64_t k = 0;
  int64_t block = 32;            // 32, or 256 for the K types
  int planes = 1;                // 1 or 2
  std::vector<int8_t> q, q2;     // k values each (q2 empty with one plane)
  std::vector<float> d;          // one scale per block
  std::vector<float> unit;       // per block: the value of one integer step of the combined code (d, or d / 256)
  std::vector<int32_t> corr;     // per 4 values of q: -offset * (their sum), the vpdpbusd accumulator's start
  std::vector<int32_t> corr2;    // with two planes: -offset * (256 * sum of 4 q + sum of their q2)
  std::vector<float> qsum32;     // per 32 values: sum of q (+ q2 / 256), exact
  std::vector<float> dsum32;     // per 32 values: d * qsum32 (the weight min's factor)
  std::vector<float> ud;         // 32-element blocks: unit and dsum32 side by side, as the kernels load them
};

// True when `type` has an 8-bit-activation product here (on any CPU: the portable reference computes it too).
bool act8_type(uint32_t type);
// True when this CPU runs the vectorised integer products (AVX-512 VNNI), which matmul_quant then uses for decode
// when cpu_activations() says int8 or int16 (act8_decode).
bool act8_fast();

// Quantises x[k] for weights of `type` (act8_type; k a multiple of its block) into a: vectorised where act8_fast(),
// else act8_quantize_ref, the portable version, whose bytes are the same.
void act8_quantize(const float *x, int64_t k, uint32_t type, int planes, Act8 *a);
void act8_quantize_ref(const float *x, int64_t k, uint32_t type, int planes, Act8 *a);

// The portable reference: dot of one weight row (k elements of `type`) with quantised activations, blocks summed in
// order, each block's integer sum exact. The vectorised kernels compute the same integers and differ only in the
// order of the float sums.
float act8_dot_ref(const uint8_t *row, uint32_t type, const Act8 &a);

// out[n, m] = x[n, k] . W[m, k]^T with x quantised to 8 bits per token: the vectorised kernels where act8_fast(),
// else the reference. False when the type has no 8-bit product. Rows are split over the pool; each output is
// computed by one thread in a fixed order, so results do not depend on the thread count.
bool matmul_act8(float *out, const float *x, const void *w, uint32_t type, int64_t n, int64_t m, int64_t k,
                 int planes, ThreadPool *pool);

// True when decode products of `type` with k columns take the integer activations now (cpu_activations() not f32,
// act8_fast(), act8_type(type), k a multiple of its block): what matmul_quant does for fewer than 4 tokens. Sets
// *planes (1 for int8, 2 for int16).
bool act8_decode(uint32_t type, int64_t k, int *planes);
// Rows [0, m) of W (`type`, k columns) against one token's activations quantised by act8_quantize for that type:
// out[r] = the dot matmul_act8 computes for that row, the same bits. On this thread.
void act8_rows(float *out, const Act8 &a, const void *w, uint32_t type, int64_t m);

}  // namespace cpu
}  // namespace infokv
