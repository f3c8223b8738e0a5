// Run-time CPU feature checks for the vectorised kernels (one place, so every kernel agrees).
#pragma once

namespace infokv {

// AVX2 + FMA + F16C: the x86-64-v3 subset the CPU kernels' fast paths use. F16C is read from CPUID directly
// because clang's __builtin_cpu_supports does not know the "f16c" feature name.
// The environment variable INFOKV_CPU_KERNELS=portable makes it false on any CPU (read once, at the first call).
bool cpu_has_avx2_fma_f16c();

// AVX-512 F/BW/VL/DQ on top of the above (the OS saving the 512-bit state): the matrix tiles' and decode dots'
// wider path.
// INFOKV_CPU_KERNELS=avx2 (or portable) makes it false on any CPU, so one machine can test every path.
bool cpu_has_avx512();

// An AMD CPU (CPUID vendor AuthenticAMD): decode's software prefetch distance is tuned per vendor (see
// tile::fused_ahead), as the two vendors' hardware prefetchers follow a weight stream differently.
bool cpu_is_amd();

}  // namespace infokv
