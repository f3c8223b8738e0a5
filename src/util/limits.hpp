// The sizes the runtime accepts from callers, configs and files, in one place: each name is one meaning. The checks
// that use them say the value in their messages; the C headers and schema comments spell the same numbers.
#pragma once
#include <cstdint>

namespace infokv {
namespace limits {

constexpr int32_t max_threads = 1024;          // a session's worker threads
constexpr int32_t max_block_size = 1024;       // tokens per KV block: sessions, configs, the CLI, snapshot headers
constexpr int32_t max_window = 4096;           // observation-window tokens (compression.window)
constexpr int32_t max_protected_spans = 4096;  // protected spans per sequence
constexpr int32_t max_layers = 4096;           // layers of a tuning profile or a snapshot's cache layout
constexpr int32_t max_kv_heads = 4096;         // KV heads, and values per head, in a snapshot's cache layout
constexpr int32_t max_head_dim = 4096;
constexpr int64_t max_tag_bytes = 4096;        // a tuning profile's workload tag

}  // namespace limits
}  // namespace infokv
