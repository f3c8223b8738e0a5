// The options a session is made with (C: ikv_session_options; configs: schemas/config.fbs), apart from the session
// so that what only reads options (configs, the CLI's arguments) does not depend on the session.
#pragma once
#include <cstdint>
#include <string>

#include "compress/policy.hpp"
#include "kernels/paged_kv.hpp"
#include "util/defaults.hpp"

namespace infokv {

struct SessionOptions {
  int32_t n_threads = defaults::n_threads;  // 0: available cores
  KvDtype kv_dtype = KvDtype::f16;
  int32_t block_size = defaults::block_size;
  int64_t kv_pool_blocks = 0;    // pool size in blocks (all layers); 0: from kv_pool_bytes or the default
  int64_t kv_pool_bytes = 0;     // pool size in bytes; 0: kv_pool_fraction or the default
  // Pool size as a fraction of the device's free memory once the weights are loaded (CUDA: cudaMemGetInfo; CPU:
  // available physical memory), at most 4 x the trained context. 0: the default, which is 0.8 on CUDA, and on the
  // CPU 4 x the trained context capped at 1 GiB (lazily committed).
  double kv_pool_fraction = 0;
  int32_t ubatch = defaults::ubatch;  // tokens per forward chunk
  // Most sequences the session holds at once, in [1, 2^20]. Each costs host memory outside the pool (block tables,
  // logits and, with a policy, the observation window: 2.3 MiB for SmolLM2-135M), so an embedder facing untrusted
  // callers bounds it; add_sequence, fork_sequence and restore beyond it throw out_of_range and change nothing.
  int32_t max_sequences = defaults::max_sequences;
  // The most host memory the session may commit: its sequences' state outside the pool (every shared observation
  // window counted as if copied) and, on the CPU, the KV pool; fork_sequence past it throws out_of_memory. 0: the
  // machine's physical memory. Not in the C API (tests set it).
  int64_t host_memory_limit = 0;
  // The compression configuration the session starts with; Session::compressor().config() is the one in force.
  CompressionConfig compression;
  // Positions [0, protect_prefix) of every sequence add_sequence() makes are protected from eviction (a system
  // prompt, say); forks keep their source's spans and restored sequences the saved ones. 0: none.
  int64_t protect_prefix = 0;
  // "auto" (default: the runtime's choice, today the CPU; src/backend/README.md says why), "cpu", "cuda", "cuda:N"
  // (src/backend/device.hpp). "cuda" without a usable GPU fails with Status::no_device. C callers set it in
  // ikv_session_options.device, configs in `device`.
  std::string device = defaults::device;
};

}  // namespace infokv
