// The x86 intrinsics header, included through here by every CPU kernel, and IKV_X86 (arch.hpp: 1 where the x86
// paths are compiled, x86-64 and i386; 0 elsewhere, aarch64: the portable paths only; see packaging/cross/). Every
// intrinsic and target("avx...") function sits under `#if IKV_X86`, and so does every call of one.
// GCC 12 warns about its own AVX-512 headers once their intrinsics are inlined (-W[maybe-]uninitialized on the
// "undefined" vectors they start from, a known false positive); the warnings are silenced for those headers only,
// which works only if this is where they are first included.
#pragma once
#include "kernels/cpu/arch.hpp"
#if IKV_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// The x86 target sets the kernels are compiled for, one name each. A function of a set calls (and inlines) functions
// of its own set or a smaller one only, and runs only where the CPU has its set (cpu_features.hpp). Every x86 function
// takes one of these three, helpers included: each set holds the one before, and a helper's set no wider than its
// callers' lets it inline anywhere it is called.
#define IKV_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define IKV_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define IKV_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
