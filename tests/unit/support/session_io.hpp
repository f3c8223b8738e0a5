// Snapshots of one sequence in memory and logits fed token by token: what the tests of quantised and mixed-precision
// caches compare a restored sequence with its original by.
#pragma once
#include <cstdint>
#include <vector>

#include "session/session.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"

namespace infokv_test {

inline std::vector<uint8_t> save_bytes(const infokv::Session &s, int32_t seq) {
  infokv::snapshot::VectorSink sink;
  infokv::snapshot::save(s, seq, nullptr, sink, {});
  return sink.bytes();
}

// Restores `b` into `s`: its status (ok, or the error's), and the new ids in *ids.
inline infokv::Status restore_status(infokv::Session &s, const std::vector<uint8_t> &b, std::vector<int32_t> *ids = nullptr) {
  try {
    infokv::snapshot::MemorySource src(b.data(), b.size());
    std::vector<int32_t> got = infokv::snapshot::restore(s, nullptr, src);
    if (ids != nullptr) *ids = got;
  } catch (const infokv::Error &e) {
    return e.status();
  }
  return infokv::Status::ok;
}

// The logits after each of `next`, fed one at a time.
inline std::vector<std::vector<float>> feed(infokv::Session &s, int32_t seq, const std::vector<int32_t> &next) {
  std::vector<std::vector<float>> out;
  for (int32_t t : next) {
    s.decode({{seq, t, false}});
    out.push_back(s.logits(seq));
  }
  return out;
}

}  // namespace infokv_test
