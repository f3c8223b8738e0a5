#include "engine/prefix_cache.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "compress/policy.hpp"
#include "snapshot/snapshot.hpp"
#include "util/byte_io.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {
std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}
}  // namespace

PrefixCache::PrefixCache(const PrefixCacheOptions &opts, const Session &session) : opts_(opts) {
  if (opts.min_tokens < 1 || opts.boundary < 1) fail(Status::invalid_argument, "prefix cache min_tokens and boundary must be positive");
  const Model &m = session.model();
  const CompressionConfig &c = session.compressor().config();
  char desc[512];
  std::snprintf(desc, sizeof desc, "w=%llx t=%llx kv=%s bs=%d policy=%s bf=%.17g bt=%d ml=%.17g win=%d",
                static_cast<unsigned long long>(m.weights_fingerprint()),
                static_cast<unsigned long long>(m.tokenizer().fingerprint()), kv_dtype_name(session.options().kv_dtype),
                session.options().block_size, policy_name(c.policy), c.budget_fraction, c.budget_tokens, c.max_loss,
                c.window);
  ns_ = hex64(XXH3_64bits(desc, std::char_traits<char>::length(desc)));
  if (opts.memory_bytes > 0) memory_ = std::make_unique<MemoryPrefixStore>(opts.memory_bytes);
  if (!opts.disk_dir.empty()) disk_ = std::make_unique<DiskPrefixStore>(opts.disk_dir, opts.disk_bytes);
  if (!opts.redis.empty()) redis_ = std::make_unique<RedisPrefixStore>(opts.redis, opts.redis_timeout_s);
}

std::vector<PrefixStore *> PrefixCache::tiers() const {
  std::vector<PrefixStore *> t;
  for (PrefixStore *s : {static_cast<PrefixStore *>(memory_.get()), static_cast<PrefixStore *>(disk_.get()),
                         static_cast<PrefixStore *>(redis_.get())})
    if (s != nullptr) t.push_back(s);
  return t;
}

std::string PrefixCache::key(int64_t length, const std::vector<int32_t> &tokens) const {
  const uint64_t h = XXH3_64bits_withSeed(tokens.data(), static_cast<size_t>(length) * sizeof(int32_t), 0x696b76);
  return ns_ + "/" + std::to_string(length) + "/" + hex64(h);
}

void PrefixCache::note(const std::string &s) {
  notes_.push_back(s);
  if (notes_.size() > 64) notes_.erase(notes_.begin());
}

int32_t PrefixCache::restore_longest(Session &session, const std::vector<int32_t> &tokens, int64_t *length,
                                     std::string *tier) {
  *length = 0;
  tier->clear();
  ++stats_.lookups;
  const std::vector<PrefixStore *> ts = tiers();
  std::set<int64_t> lens;
  std::vector<bool> usable(ts.size(), true);
  for (size_t i = 0; i < ts.size(); ++i) {
    try {
      for (int64_t L : ts[i]->lengths(ns_))
        if (L <= static_cast<int64_t>(tokens.size()) && L >= opts_.min_tokens) lens.insert(L);
    } catch (const Error &e) {
      ++stats_.store_errors;
      usable[i] = false;
      note(std::string(ts[i]->name()) + ": " + e.what() + " (skipped: the prompt is prefilled)");
    }
  }
  for (auto it = lens.rbegin(); it != lens.rend(); ++it) {
    const int64_t L = *it;
    const std::string k = key(L, tokens);
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!usable[i]) continue;
      std::optional<std::vector<uint8_t>> bytes;
      try {
        bytes = ts[i]->get(k);
      } catch (const Error &e) {
        ++stats_.store_errors;
        usable[i] = false;
        note(std::string(ts[i]->name()) + ": " + e.what() + " (skipped: the prompt is prefilled)");
        continue;
      }
      if (!bytes) continue;
      std::vector<int32_t> ids;
      try {
        MemorySource src(bytes->data(), bytes->size());
        ids = snapshot::restore(session, nullptr, src, 1);
      } catch (const Error &e) {
        if (e.status() == Status::kv_full) throw;
        ++stats_.refused;
        note(std::string(ts[i]->name()) + " entry " + k + " refused: " + e.what());
        try {
          ts[i]->erase(k);
        } catch (const Error &) {
        }
        continue;
      }
      const std::vector<int32_t> &got = session.tokens(ids.at(0));
      if (static_cast<int64_t>(got.size()) != L || !std::equal(got.begin(), got.end(), tokens.begin())) {
        session.remove_sequence(ids[0]);
        ++stats_.refused;
        note(std::string(ts[i]->name()) + " entry " + k + " refused: its tokens are not the request's");
        try {
          ts[i]->erase(k);
        } catch (const Error &) {
        }
        continue;
      }
      // Found: faster tiers get a copy for next time.
      for (size_t j = 0; j < i; ++j) {
        if (!usable[j]) continue;
        try {
          ts[j]->put(ns_, L, k, *bytes);
        } catch (const Error &e) {
          ++stats_.store_errors;
          note(std::string(ts[j]->name()) + ": " + e.what());
        }
      }
      ++stats_.hits;
      stats_.hit_tokens += L;
      const std::string n = ts[i]->name();
      ++stats_.hits_by_tier[n == "memory" ? 0 : n == "disk" ? 1 : 2];
      *length = L;
      *tier = n;
      return ids[0];
    }
  }
  return -1;
}

void PrefixCache::save_at(Session &session, int32_t seq, int64_t length) {
  const std::vector<int32_t> &toks = session.tokens(seq);
  const std::string k = key(length, toks);
  bool have = false;
  for (PrefixStore *t : tiers()) {
    try {
      if (t == memory_.get() && t->get(k)) have = true;
    } catch (const Error &) {
    }
  }
  if (have) return;  // saved before (by this process)
  VectorSink out;
  int32_t src = seq;
  if (length < static_cast<int64_t>(toks.size())) {
    src = session.fork_sequence(seq);
    session.truncate(src, length);
  }
  try {
    // A truncated fork has no logits of its own: the first request that restores it prefills at least one token.
    snapshot::save(session, src, nullptr, out);
  } catch (...) {
    if (src != seq) session.remove_sequence(src);
    throw;
  }
  if (src != seq) session.remove_sequence(src);
  ++stats_.saves;
  for (PrefixStore *t : tiers()) {
    try {
      t->put(ns_, length, k, out.bytes());
    } catch (const Error &e) {
      ++stats_.store_errors;
      note(std::string(t->name()) + ": " + e.what() + " (entry not saved there)");
    }
  }
}

void PrefixCache::save(Session &session, int32_t seq) {
  const int64_t n = static_cast<int64_t>(session.tokens(seq).size());
  // Only an uncompressed sequence is a prefix of every longer request; a compressed one was shaped by its own end.
  const SeqInfo info = session.info(seq);
  for (int32_t k : info.kept_per_layer)
    if (k < n) return;
  if (n >= opts_.min_tokens) save_at(session, seq, n);
  const int64_t b = ((n - 1) / opts_.boundary) * opts_.boundary;
  if (b >= opts_.min_tokens && b < n) save_at(session, seq, b);
}

}  // namespace infokv
