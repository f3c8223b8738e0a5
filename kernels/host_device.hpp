// IKV_HD marks small inline functions that CUDA kernels share with the CPU code (bit-exact twins by construction:
// one definition compiled for both). Plain inline in host-only translation units; no CUDA header needed.
#pragma once
#ifdef __CUDACC__
#define IKV_HD __host__ __device__
#else
#define IKV_HD
#endif
