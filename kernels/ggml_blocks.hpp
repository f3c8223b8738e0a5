// The byte layout of each ggml block type the kernels decode, as ggml declares it (ggml-common.h), for sizeof and
// offsetof: code reads a block's fields through byte pointers at `offsetof(block::Q6_K, scales)` and so on (a row of
// blocks in a mapped file is not aligned for the structs, so nothing is read through them). Host and device code
// (kernels/dequant.hpp, the CPU kernels, kernels/cuda) share this one header; the sizes are checked against
// ggml_type_traits, the table every block size is read from.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/ggml_types.hpp"

namespace infokv {
namespace block {

// 32 elements a block. d, m: f16 scale and min; qs: 4-bit codes (low nibbles elements 0..15, high 16..31) or 8-bit
// codes; qh: bit 4 of element j in bit j.
struct Q4_0 { uint16_t d; uint8_t qs[16]; };
struct Q4_1 { uint16_t d, m; uint8_t qs[16]; };
struct Q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct Q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct Q8_0 { uint16_t d; int8_t qs[32]; };
// 256 elements a super-block. Q4_K/Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in scales[12];
// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales, low 4 bits of each code in ql, high 2 in qh.
struct Q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct Q5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct Q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };

static_assert(sizeof(Q4_0) == ggml_block_bytes(GgmlType::Q4_0), "Q4_0 block");
static_assert(sizeof(Q4_1) == ggml_block_bytes(GgmlType::Q4_1), "Q4_1 block");
static_assert(sizeof(Q5_0) == ggml_block_bytes(GgmlType::Q5_0), "Q5_0 block");
static_assert(sizeof(Q5_1) == ggml_block_bytes(GgmlType::Q5_1), "Q5_1 block");
static_assert(sizeof(Q8_0) == ggml_block_bytes(GgmlType::Q8_0), "Q8_0 block");
static_assert(sizeof(Q4_K) == ggml_block_bytes(GgmlType::Q4_K), "Q4_K super-block");
static_assert(sizeof(Q5_K) == ggml_block_bytes(GgmlType::Q5_K), "Q5_K super-block");
static_assert(sizeof(Q6_K) == ggml_block_bytes(GgmlType::Q6_K), "Q6_K super-block");

// Where the codes (qs) of a 32-element block of type t start: Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0.
constexpr int64_t codes_offset(GgmlType t) {
  return t == GgmlType::Q4_1   ? offsetof(Q4_1, qs)
         : t == GgmlType::Q5_0 ? offsetof(Q5_0, qs)
         : t == GgmlType::Q5_1 ? offsetof(Q5_1, qs)
         : t == GgmlType::Q8_0 ? offsetof(Q8_0, qs)
                               : offsetof(Q4_0, qs);
}

}  // namespace block
}  // namespace infokv
