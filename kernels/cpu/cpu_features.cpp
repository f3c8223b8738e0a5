#include "kernels/cpu/cpu_features.hpp"

#include "kernels/cpu/arch.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if IKV_X86
#include <cpuid.h>
#endif

namespace infokv {

bool cpu_probe::avx2_fma_f16c() {
#if IKV_X86
  // INFOKV_CPU_KERNELS=portable takes the portable kernels on any CPU: the tests run both paths on one machine.
  const char *force = std::getenv("INFOKV_CPU_KERNELS");
  if (force != nullptr && std::strcmp(force, "portable") == 0) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_probe::avx512() {
#if IKV_X86
  const char *force = std::getenv("INFOKV_CPU_KERNELS");
  if (force != nullptr && std::strcmp(force, "avx2") == 0) return false;
  // __builtin_cpu_supports checks that the OS enables the ZMM state (XCR0) before it reports AVX-512
  return cpu_has_avx2_fma_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool cpu_probe::avx512_vnni() {
#if IKV_X86
  return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

const CpuActivations kDefaultCpuActivations = CpuActivations::int16;

namespace {
std::atomic<int> &activations_slot() {
  static std::atomic<int> slot{[] {
    const char *v = std::getenv("INFOKV_CPU_ACTIVATIONS");
    if (v != nullptr && std::strcmp(v, "int8") == 0) return static_cast<int>(CpuActivations::int8);
    if (v != nullptr && std::strcmp(v, "int16") == 0) return static_cast<int>(CpuActivations::int16);
    if (v != nullptr && std::strcmp(v, "f32") == 0) return static_cast<int>(CpuActivations::f32);
    return static_cast<int>(kDefaultCpuActivations);
  }()};
  return slot;
}
}  // namespace

CpuActivations cpu_activations() { return static_cast<CpuActivations>(activations_slot().load(std::memory_order_relaxed)); }

void set_cpu_activations(CpuActivations a) { activations_slot().store(static_cast<int>(a), std::memory_order_relaxed); }

const char *cpu_kernels_name() {
  if (cpu_has_avx512_vnni()) return "avx512-vnni";
  if (cpu_has_avx512()) return "avx512";
  if (cpu_has_avx2_fma_f16c()) return "avx2";
  return "portable";
}

const char *cpu_arch_name() {
#if defined(__x86_64__)
  return "x86-64";
#elif defined(__i386__)
  return "i386";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "other";
#endif
}

bool cpu_is_amd() {
#if IKV_X86
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

}  // namespace infokv
