// What a sequence holds, as the CLI reports it (generate --json, chat --json).
#pragma once
#include <cstdint>
#include <string>

#include "session/session.hpp"

namespace infokv {
namespace cli {

// The sequence's KV accounting: bytes held and uncompressed, the budget and slack compression holds it to, blocks,
// kept tokens per layer, the pool.
std::string kv_json(const Session &s, int32_t seq);

// Protected spans of `seq`, checked against the cache itself: is every protected position still held in every
// layer? And the protected tokens released to keep protection within the budget. Empty when the sequence has no
// spans and released none.
std::string protected_json(const Session &session, int32_t seq);

}  // namespace cli
}  // namespace infokv
