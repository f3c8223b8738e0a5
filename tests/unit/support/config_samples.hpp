// Config texts shared by the config tests and the allocation-failure tests.
#pragma once

namespace infokv_test {

// A JSON config that sets a field in every group (model path, device, session, compression, protection, sampler,
// self-tuning), each to a value other than its default.
constexpr const char *kEveryGroupJson = R"({
    "model_path": "m.gguf", "device": "cuda:1", "threads": 3, "kv_dtype": "bf16", "block_size": 32,
    "kv_pool_bytes": 1048576, "ubatch": 64,
    "compression": {"policy": "infokv", "budget_fraction": 0.25, "alpha": 0.95, "interval": 128, "shape": "pyramid"},
    "protection": {"protect_prefix": 12},
    "sampler": {"temperature": 0, "seed": 99, "top_k": 5},
    "self_tuning": {"enabled": false, "kl_bound": 0.1, "probe_tokens": 32}
  })";

}  // namespace infokv_test
