#include "kernels/paged_kv.hpp"

namespace infokv {

const char *kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::f32: return "f32";
    case KvDtype::f16: return "f16";
    case KvDtype::bf16: return "bf16";
  }
  return "unknown";
}

}  // namespace infokv
