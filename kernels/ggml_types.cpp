#include "kernels/ggml_types.hpp"

namespace infokv {

const char *ggml_type_name(uint32_t type) { return ggml_type_traits(type).name; }

}  // namespace infokv
