// IKV_X86: 1 where the x86 paths are compiled (x86-64 and i386), 0 elsewhere (aarch64: the portable paths only; see
// packaging/cross/). The one place that spells the test; simd.hpp adds the intrinsics.
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#define IKV_X86 1
#else
#define IKV_X86 0
#endif
