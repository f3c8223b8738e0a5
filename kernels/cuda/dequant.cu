// Dequantisation of ggml's quantised weight types to f16 on the device, for weights uploaded in their compact form
// and expanded once at load. The block functions are the CPU's own (kernels/dequant.hpp, compiled for both
// sides), and so is the f32 -> f16 rounding (kernels/fp16.hpp): the twin cpu::dequantize_f16 is bit-exact by
// construction.
#include "kernels/dequant.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/ggml_types.hpp"

namespace infokv {
namespace cuda {

namespace {

constexpr int kThreads = 128;

// One thread per quantised block. src: [n_blocks * BYTES]; out: [n_blocks * ELEMS] f16 bits.
template <int TYPE, int ELEMS, int BYTES>
__global__ void dequant_f16_kernel(uint16_t *out, const uint8_t *src, int64_t n_blocks) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < n_blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float y[ELEMS];
    const uint8_t *s = src + b * BYTES;
    if constexpr (TYPE == static_cast<int>(GgmlType::Q4_0)) dq::q4_0(y, s);
    else if constexpr (TYPE == static_cast<int>(GgmlType::Q4_1)) dq::q4_1(y, s);
    else if constexpr (TYPE == static_cast<int>(GgmlType::Q5_0)) dq::q5_0(y, s);
    else if constexpr (TYPE == static_cast<int>(GgmlType::Q5_1)) dq::q5_1(y, s);
    else if constexpr (TYPE == static_cast<int>(GgmlType::Q8_0)) dq::q8_0(y, s);
    else if constexpr (TYPE == static_cast<int>(GgmlType::Q4_K)) dq::q4_k(y, s);
    else if constexpr (TYPE == static_cast<int>(GgmlType::Q5_K)) dq::q5_k(y, s);
    else dq::q6_k(y, s);
    for (int i = 0; i < ELEMS; ++i) out[b * ELEMS + i] = float_to_fp16(y[i]);
  }
}

template <GgmlType T>
Status launch(void *out, const void *src, int64_t n, Stream *stream) {
  // the block's geometry from the one table (ggml_types.hpp), as compile-time constants of the kernel
  constexpr int ELEMS = static_cast<int>(ggml_block_elems(T)), BYTES = static_cast<int>(ggml_block_bytes(T));
  if (n % ELEMS != 0) return Status::invalid_argument;
  const int64_t nb = n / ELEMS;
  dequant_f16_kernel<static_cast<int>(T), ELEMS, BYTES><<<grid_for(nb, kThreads), kThreads, 0, raw_stream(stream)>>>(
      static_cast<uint16_t *>(out), static_cast<const uint8_t *>(src), nb);
  return launch_status();
}

}  // namespace

Status dequantize_f16(void *out, const void *src, uint32_t type, int64_t n, Stream *stream) {
  if (n < 0 || (n > 0 && (out == nullptr || src == nullptr))) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return launch<GgmlType::Q4_0>(out, src, n, stream);
    case GgmlType::Q4_1: return launch<GgmlType::Q4_1>(out, src, n, stream);
    case GgmlType::Q5_0: return launch<GgmlType::Q5_0>(out, src, n, stream);
    case GgmlType::Q5_1: return launch<GgmlType::Q5_1>(out, src, n, stream);
    case GgmlType::Q8_0: return launch<GgmlType::Q8_0>(out, src, n, stream);
    case GgmlType::Q4_K: return launch<GgmlType::Q4_K>(out, src, n, stream);
    case GgmlType::Q5_K: return launch<GgmlType::Q5_K>(out, src, n, stream);
    case GgmlType::Q6_K: return launch<GgmlType::Q6_K>(out, src, n, stream);
    default: return Status::unsupported;
  }
}

}  // namespace cuda
}  // namespace infokv
