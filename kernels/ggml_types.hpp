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

// Geometry of a type id; name == nullptr when the id is unknown.
GgmlTypeTraits ggml_type_traits(uint32_t type);
const char *ggml_type_name(uint32_t type);  // "type 99" style text is produced by callers when nullptr

}  // namespace infokv
