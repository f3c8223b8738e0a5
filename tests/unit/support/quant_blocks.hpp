// Random blocks of ggml's quantised types with finite scales, for dequantisation tests on both devices.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"

namespace infokv_test {

// Offsets of the f16 scale fields of a block, which random bytes must keep finite.
inline std::vector<size_t> f16_fields(infokv::GgmlType t) {
  switch (t) {
    case infokv::GgmlType::Q4_1: case infokv::GgmlType::Q5_1: case infokv::GgmlType::Q4_K: case infokv::GgmlType::Q5_K: return {0, 2};
    case infokv::GgmlType::Q6_K: return {208};
    default: return {0};
  }
}

// n_blocks random blocks of type t with scales of magnitude about `scale`.
inline std::vector<uint8_t> random_quant_blocks(infokv::GgmlType t, size_t n_blocks, float scale, std::mt19937_64 &rng) {
  const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(static_cast<uint32_t>(t));
  std::vector<uint8_t> b(n_blocks * tr.block_bytes);
  for (uint8_t &x : b) x = static_cast<uint8_t>(rng());
  std::normal_distribution<float> nd(0.0f, scale);
  for (size_t k = 0; k < n_blocks; ++k)
    for (size_t off : f16_fields(t)) {
      uint16_t h = infokv::float_to_fp16(nd(rng));
      std::memcpy(&b[k * tr.block_bytes + off], &h, 2);
    }
  return b;
}

}  // namespace infokv_test
