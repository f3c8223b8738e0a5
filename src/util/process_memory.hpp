// The process's resident memory as the kernel counts it (/proc/self/status): what a user's `time -v` or `top`
// sees, so that memory figures are reported next to the KV accounting, not instead of it.
#pragma once
#include <cstdint>

namespace infokv {

// Peak resident set size (VmHWM) in bytes; -1 where the kernel does not report it.
int64_t peak_rss_bytes();
// Current resident set size (VmRSS) in bytes; -1 where the kernel does not report it.
int64_t current_rss_bytes();

}  // namespace infokv
