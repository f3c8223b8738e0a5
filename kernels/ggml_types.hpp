// Tensor element types as numbered by GGUF/ggml, with their block geometry.
#pragma once
#include <cstddef>
#include <cstdint>

namespace infokv {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35,
};

struct GgmlTypeTraits {
  const char *name;  // nullptr for numbers that name no type
  uint32_t block_elems;
  uint32_t block_bytes;
};

// Geometry of a type id; name == nullptr when the id is unknown. constexpr so that kernels take a block's size as a
// compile-time constant from this one table.
constexpr GgmlTypeTraits ggml_type_traits(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: return {"F32", 1, 4};
    case GgmlType::F16: return {"F16", 1, 2};
    case GgmlType::BF16: return {"BF16", 1, 2};
    case GgmlType::Q4_0: return {"Q4_0", 32, 18};
    case GgmlType::Q4_1: return {"Q4_1", 32, 20};
    case GgmlType::Q5_0: return {"Q5_0", 32, 22};
    case GgmlType::Q5_1: return {"Q5_1", 32, 24};
    case GgmlType::Q8_0: return {"Q8_0", 32, 34};
    case GgmlType::Q8_1: return {"Q8_1", 32, 36};
    case GgmlType::Q2_K: return {"Q2_K", 256, 84};
    case GgmlType::Q3_K: return {"Q3_K", 256, 110};
    case GgmlType::Q4_K: return {"Q4_K", 256, 144};
    case GgmlType::Q5_K: return {"Q5_K", 256, 176};
    case GgmlType::Q6_K: return {"Q6_K", 256, 210};
    case GgmlType::Q8_K: return {"Q8_K", 256, 292};
    case GgmlType::IQ2_XXS: return {"IQ2_XXS", 256, 66};
    case GgmlType::IQ2_XS: return {"IQ2_XS", 256, 74};
    case GgmlType::IQ3_XXS: return {"IQ3_XXS", 256, 98};
    case GgmlType::IQ1_S: return {"IQ1_S", 256, 50};
    case GgmlType::IQ4_NL: return {"IQ4_NL", 32, 18};
    case GgmlType::IQ3_S: return {"IQ3_S", 256, 110};
    case GgmlType::IQ2_S: return {"IQ2_S", 256, 82};
    case GgmlType::IQ4_XS: return {"IQ4_XS", 256, 136};
    case GgmlType::I8: return {"I8", 1, 1};
    case GgmlType::I16: return {"I16", 1, 2};
    case GgmlType::I32: return {"I32", 1, 4};
    case GgmlType::I64: return {"I64", 1, 8};
    case GgmlType::F64: return {"F64", 1, 8};
    case GgmlType::IQ1_M: return {"IQ1_M", 256, 56};
    case GgmlType::TQ1_0: return {"TQ1_0", 256, 54};
    case GgmlType::TQ2_0: return {"TQ2_0", 256, 66};
  }
  return {nullptr, 0, 0};
}

constexpr int64_t ggml_block_elems(GgmlType t) { return ggml_type_traits(static_cast<uint32_t>(t)).block_elems; }
constexpr int64_t ggml_block_bytes(GgmlType t) { return ggml_type_traits(static_cast<uint32_t>(t)).block_bytes; }

const char *ggml_type_name(uint32_t type);  // "type 99" style text is produced by callers when nullptr

}  // namespace infokv
