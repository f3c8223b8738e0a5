// The runtime's defaults, in one place. The core structs (SessionOptions, CompressionConfig, SamplerParams) take
// their initial values from here; the C header (IKV_SESSION_OPTIONS_INIT, IKV_SAMPLER_OPTIONS_INIT) and
// schemas/config.fbs must spell the same values as literals (C and the schema language cannot include this file),
// and tests/unit/capi/test_defaults.cpp checks that all of them agree with these.
#pragma once
#include <cstdint>

namespace infokv {
namespace defaults {

// Session and KV layout.
constexpr int32_t n_threads = 0;  // 0: available cores
constexpr int32_t block_size = 16;
constexpr int32_t ubatch = 256;
constexpr int32_t max_sequences = 4096;  // C options and configs: 0 means this
// The device: the runtime's choice (src/backend/device.hpp). C options: NULL or "" means this.
constexpr const char *device = "auto";

// Compression.
constexpr int32_t window = -1;  // min(max_window, budget / 4)
// The default observation window's size at most, the window a quality target alone keeps, and the fewest
// observation-window rows a sequence keeps for scoring.
constexpr int32_t max_window = 32;
constexpr int32_t pool_kernel_prefill = 5;
constexpr int32_t pool_kernel_decode = 7;
// A probe question's attention (Question::later, both) is pooled over at least this many positions: a needle sentence
// with a 7-digit number is about 20 of Qwen2.5's tokens (one per digit), and a narrow kernel keeps part of it. Measured
// in packaging/docs/quality.md ("Pooling a probe's attention"): 0.58 -> 0.78 of the multi-needle tasks at 25% with 5 -> 15.
constexpr int32_t pool_kernel_probe = 15;
constexpr float alpha = 0.9f;
constexpr float tau = 1.0f;
constexpr int32_t entropy_top_k = 256;
constexpr int32_t interval = 1024;  // read as 0: compression triggered by memory (CompressionConfig::interval)
constexpr float beta = 20.0f;
constexpr int32_t sink = 4;
constexpr bool compress_after_prefill = true;
constexpr bool layer_precision = true;  // auto may hold a layer at q8_0 under a byte budget (packaging/docs/kv_dtypes.md)

// Sampler.
constexpr float temperature = 0.8f;
constexpr int32_t top_k = 40;
constexpr float top_p = 0.95f;
constexpr float min_p = 0.05f;
constexpr float repeat_penalty = 1.0f;
constexpr int32_t repeat_last_n = 64;
constexpr uint64_t seed = 0;

}  // namespace defaults
}  // namespace infokv
