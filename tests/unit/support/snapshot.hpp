// Helpers for the snapshot and config tests: a shared model, sessions, a generation trace, and a re-implementation
// of the container framing (from the comment in schemas/snapshot.fbs) to edit chunks and re-seal a file.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <xxhash.h>

#include "compress/policy_table.hpp"
#include "model/model.hpp"
#include "sampling/sampler.hpp"
#include "session/session.hpp"
#include "support/stories_model.hpp"
#include "support/paths.hpp"

namespace infokv_test {

inline infokv::SessionOptions session_opts(infokv::PolicyKind p = infokv::PolicyKind::none, double budget = 0.0,
                                           int32_t interval = 1024, infokv::KvDtype dt = infokv::KvDtype::f16,
                                           int32_t block_size = 16) {
  infokv::SessionOptions o;
  o.n_threads = 1;
  o.kv_dtype = dt;
  o.block_size = block_size;
  o.kv_pool_blocks = 4096;
  o.compression.policy = p;
  o.compression.budget_fraction = budget;
  o.compression.interval = interval;
  return o;
}

inline std::vector<int32_t> story_prompt(const infokv::Model &m) {
  return m.tokenizer().encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.", true);
}

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // after each token was decoded
};

// Samples, accepts and decodes n tokens one by one, recording each token and the logits that follow it.
inline Trace continue_n(infokv::Session &s, int32_t seq, infokv::Sampler &sampler, int n) {
  Trace t;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> &lg = s.logits(seq);
    const int32_t tok = sampler.sample(lg.data(), static_cast<int32_t>(lg.size()));
    sampler.accept(tok);
    s.decode({{seq, tok, false}});
    t.tokens.push_back(tok);
    t.logits.push_back(s.logits(seq));
  }
  return t;
}

inline void prefill(infokv::Session &s, int32_t seq, infokv::Sampler *sampler, const std::vector<int32_t> &p) {
  std::vector<infokv::BatchToken> b;
  for (int32_t t : p) b.push_back({seq, t, false});
  s.decode(b);
  if (sampler != nullptr)
    for (int32_t t : p) sampler->accept(t);
}

// ---- container framing ----
inline uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
inline void put_le(std::vector<uint8_t> &out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

inline std::vector<std::vector<uint8_t>> split_chunks(const std::vector<uint8_t> &f) {
  std::vector<std::vector<uint8_t>> out;
  size_t off = 8;
  for (;;) {
    const uint64_t n = get_le(f.data() + off, 4);
    off += 4;
    if (n == 0) break;
    off += 8;
    out.emplace_back(f.begin() + static_cast<long>(off), f.begin() + static_cast<long>(off + n));
    off += n;
  }
  return out;
}

inline std::vector<uint8_t> join_chunks(const std::vector<std::vector<uint8_t>> &chunks) {
  std::vector<uint8_t> f = {'I', 'K', 'V', 'S', 'N', 'A', 'P', 0};
  for (const auto &c : chunks) {
    put_le(f, c.size(), 4);
    put_le(f, XXH3_64bits(c.data(), c.size()), 8);
    f.insert(f.end(), c.begin(), c.end());
  }
  const uint64_t h = XXH3_64bits(f.data(), f.size());
  put_le(f, 0, 4);
  put_le(f, chunks.size(), 8);
  put_le(f, h, 8);
  return f;
}

}  // namespace infokv_test
