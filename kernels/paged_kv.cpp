#include "kernels/paged_kv.hpp"

#include <cstring>

namespace infokv {

const char *kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::f32: return "f32";
    case KvDtype::f16: return "f16";
    case KvDtype::bf16: return "bf16";
    case KvDtype::q8_0: return "q8_0";
    case KvDtype::q4_0: return "q4_0";
  }
  return "unknown";
}

bool kv_dtype_parse(const char *name, KvDtype *out) {
  for (int32_t t = 1; t <= 5; ++t)
    if (name != nullptr && std::strcmp(name, kv_dtype_name(static_cast<KvDtype>(t))) == 0) {
      *out = static_cast<KvDtype>(t);
      return true;
    }
  return false;
}

}  // namespace infokv
