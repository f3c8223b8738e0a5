// What a snapshot reads and writes of a session's own per-sequence state (tokens, logits, pending entropy), which
// the session keeps private: the one friend it has.
#pragma once
#include <cstdint>

#include "session/session.hpp"

namespace infokv {
namespace snapshot {

struct SessionAccess {
  using State = Session::SeqState;
  static const State &state(const Session &s, int32_t seq) { return s.state(seq); }
  // Session::adopt_sequence: a restored sequence, once every check has passed.
  static int32_t adopt(Session &s, SeqCache &&cache, State &&st, SeqCompression &&cst) {
    return s.adopt_sequence(std::move(cache), std::move(st), std::move(cst));
  }
};

}  // namespace snapshot
}  // namespace infokv
