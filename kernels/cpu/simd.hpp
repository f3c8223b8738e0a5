// The x86 intrinsics header, included through here by every CPU kernel. GCC 12 warns about its own AVX-512 headers
// once their intrinsics are inlined (-W[maybe-]uninitialized on the "undefined" vectors they start from, a known
// false positive); the warnings are silenced for those headers only, which works only if this is where they are
// first included.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
