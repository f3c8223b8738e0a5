// The quantised and grouped halves of the CPU matmul (ops.hpp), on the block dequantisers of kernels/dequant.hpp.
#pragma once
#include <cstdint>

#include "kernels/dequant.hpp"

namespace infokv {
class ThreadPool;
}

namespace infokv {
namespace cpu {
// The quantised half of matmul (ops.hpp): W is Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K, k a multiple of its
// block size. Each weight row is expanded into a per-work-item f32 buffer once and reused by every token, so the
// weights stay quantised in memory. False for other types.
bool matmul_quant(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k,
                  ThreadPool *pool);
// The grouped half (matmul_grouped.cpp): W in the grouped layout of ops.hpp (kF16Grouped, kBf16Grouped), and the
// row lookup of an embedding table in that layout. False for other types.
bool matmul_grouped(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k,
                    ThreadPool *pool);
bool get_row_grouped(float *out, const void *w, uint32_t type, int64_t row, int64_t d);
}  // namespace cpu
}  // namespace infokv
