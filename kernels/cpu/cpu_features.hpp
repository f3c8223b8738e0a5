// Run-time CPU feature checks for the vectorised kernels (one place, so every kernel agrees). Each is probed once,
// at its first call, and cached in an inline function, so that hot paths (a KV row's load) may ask it per call.
#pragma once

namespace infokv {

namespace cpu_probe {
bool avx2_fma_f16c();
bool avx512();
bool avx512_vnni();
}  // namespace cpu_probe

// AVX2 + FMA + F16C: the x86-64-v3 subset the CPU kernels' fast paths use (IKV_TARGET_AVX2 in simd.hpp). F16C is read
// from CPUID directly because clang's __builtin_cpu_supports does not know the "f16c" feature name.
// The environment variable INFOKV_CPU_KERNELS=portable makes it false on any CPU (read once, at the first call).
inline bool cpu_has_avx2_fma_f16c() {
  static const bool ok = cpu_probe::avx2_fma_f16c();
  return ok;
}

// AVX-512 F/BW/VL/DQ on top of the above (the OS saving the 512-bit state; IKV_TARGET_AVX512): the matrix tiles' and
// decode dots' wider path.
// INFOKV_CPU_KERNELS=avx2 (or portable) makes it false on any CPU, so one machine can test every path.
inline bool cpu_has_avx512() {
  static const bool ok = cpu_probe::avx512();
  return ok;
}

// AVX-512 VNNI on top of cpu_has_avx512 (vpdpbusd, vpdpwssd: the integer-activation products of matmul_act8.hpp and
// matmul_i16.hpp; IKV_TARGET_AVX512_VNNI). False wherever cpu_has_avx512 is (INFOKV_CPU_KERNELS=avx2 or portable).
inline bool cpu_has_avx512_vnni() {
  static const bool ok = cpu_probe::avx512_vnni();
  return ok;
}

// How quantised weights are multiplied: with f32 activations (exact: each block's weights widened to f32), with
// the activations rounded to 8-bit integers per block as llama.cpp does (int8), or to 16-bit precision (int16:
// decode carries it as two 8-bit planes, matmul_act8.hpp; prefill as int16, matmul_i16.hpp). Used where
// cpu_has_avx512_vnni(), for the types they cover; elsewhere the f32 path runs whatever this says.
enum class CpuActivations { f32 = 0, int8 = 1, int16 = 2 };
// The current choice: INFOKV_CPU_ACTIVATIONS=f32, int8 or int16 when set (read at the first call), else the default
// (kDefaultCpuActivations); set_cpu_activations changes it for the whole process (the evals compare the two).
CpuActivations cpu_activations();
void set_cpu_activations(CpuActivations a);
extern const CpuActivations kDefaultCpuActivations;

// The CPU kernels this process runs, after INFOKV_CPU_KERNELS: "avx512-vnni", "avx512", "avx2" or "portable"; and
// the architecture they were compiled for: "x86-64", "i386", "aarch64" or "other". For reports (`infokv info`).
const char *cpu_kernels_name();
const char *cpu_arch_name();

// An AMD CPU (CPUID vendor AuthenticAMD): decode's software prefetch distance is tuned per vendor (see
// tile::fused_ahead), as the two vendors' hardware prefetchers follow a weight stream differently.
bool cpu_is_amd();

}  // namespace infokv
