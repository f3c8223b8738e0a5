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

// A damaged entry is removed so that no one reads it again; a store that cannot remove it now only costs a later miss.
void erase_quietly(PrefixStore &store, const std::string &key) {
  try {
    store.erase(key);
  } catch (const Error &) {
  }
}
}  // namespace

PrefixCache::PrefixCache(const PrefixCacheOptions &opts, const Session &session) : opts_(opts) {
  if (opts.min_tokens < 1 || opts.boundary < 1 || opts.exact_from < 0)
    fail(Status::invalid_argument, "prefix cache min_tokens and boundary must be positive, exact_from not negative");
  const Model &m = session.model();
  const CompressionConfig &c = session.compressor().config();
  char desc[512];
  // How entries were cut is part of the key: an entry at any length is exact only for a process that cuts as its
  // maker did (exact_from), and one on a chunk multiple only for the same chunk.
  std::snprintf(desc, sizeof desc, "w=%llx t=%llx kv=%s bs=%d policy=%s bf=%.17g bt=%d ml=%.17g win=%d xf=%lld ub=%lld",
                static_cast<unsigned long long>(m.weights_fingerprint()),
                static_cast<unsigned long long>(m.tokenizer().fingerprint()), kv_dtype_name(session.options().kv_dtype),
                session.options().block_size, policy_name(c.policy), c.budget_fraction, c.budget_tokens, c.max_loss,
                c.window, static_cast<long long>(opts.exact_from), static_cast<long long>(opts.boundary));
  ns_ = hex64(XXH3_64bits(desc, std::char_traits<char>::length(desc)));
  if (opts.memory_bytes > 0) memory_ = std::make_unique<MemoryPrefixStore>(opts.memory_bytes);
  if (!opts.disk_dir.empty()) {
    disk_ = std::make_unique<DiskPrefixStore>(opts.disk_dir, opts.disk_bytes);
    wdisk_ = std::make_unique<DiskPrefixStore>(opts.disk_dir, opts.disk_bytes);
  }
  if (!opts.redis.empty()) {
    redis_ = std::make_unique<RedisPrefixStore>(opts.redis, opts.redis_timeout_s);
    wredis_ = std::make_unique<RedisPrefixStore>(opts.redis, opts.redis_timeout_s);
  }
  if (wdisk_ || wredis_) writer_ = std::thread([this] { write_loop(); });
}

PrefixCache::~PrefixCache() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void PrefixCache::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [this] { return jobs_.empty() && !writing_; });
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::vector<std::string> PrefixCache::notes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return notes_;
}

// The writer: stores each queued snapshot in the disk and Redis tiers (unless there already), in order; drains the
// queue before it stops.
void PrefixCache::write_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_ and nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    writing_ = true;
    lk.unlock();
    std::vector<std::string> errors;
    for (PrefixStore *t : {static_cast<PrefixStore *>(wdisk_.get()), static_cast<PrefixStore *>(wredis_.get())}) {
      if (t == nullptr) continue;
      try {
        if (!t->has(job.key)) t->put(ns_, job.length, job.key, *job.bytes);
      } catch (const std::exception &e) {
        errors.push_back(std::string(t->name()) + ": " + e.what() + " (entry not saved there)");
      } catch (...) {
        errors.push_back(std::string(t->name()) + ": unknown error (entry not saved there)");
      }
    }
    lk.lock();
    queued_bytes_ -= static_cast<int64_t>(job.bytes->size());
    for (const std::string &e : errors) {
      ++stats_.store_errors;
      notes_.push_back(e);
      if (notes_.size() > 64) notes_.erase(notes_.begin());
    }
    writing_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
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
  std::lock_guard<std::mutex> lk(mu_);
  notes_.push_back(s);
  if (notes_.size() > 64) notes_.erase(notes_.begin());
}

int32_t PrefixCache::restore_longest(Session &session, const std::vector<int32_t> &tokens, int64_t *length,
                                     std::string *tier) {
  *length = 0;
  tier->clear();
  auto count = [this](int64_t PrefixCacheStats::*field, int64_t by = 1) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.*field += by;
  };
  count(&PrefixCacheStats::lookups);
  const std::vector<PrefixStore *> ts = tiers();
  std::set<int64_t> lens;
  std::vector<std::set<int64_t>> tier_lens(ts.size());  // the lengths each tier holds
  std::vector<bool> usable(ts.size(), true);
  for (size_t i = 0; i < ts.size(); ++i) {
    try {
      for (int64_t L : ts[i]->lengths(ns_))
        if (L < static_cast<int64_t>(tokens.size()) && L >= opts_.min_tokens && resumable(L, static_cast<int64_t>(tokens.size()))) {
          lens.insert(L);
          tier_lens[i].insert(L);
        }
    } catch (const Error &e) {
      count(&PrefixCacheStats::store_errors);
      usable[i] = false;
      note(std::string(ts[i]->name()) + ": " + e.what() + " (skipped: the prompt is prefilled)");
    }
  }
  int redis_probes = 0;
  for (auto it = lens.rbegin(); it != lens.rend(); ++it) {
    const int64_t L = *it;
    const std::string k = key(L, tokens);
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!usable[i] || tier_lens[i].count(L) == 0) continue;
      if (ts[i] == redis_.get() && redis_probes++ >= kMaxRedisProbes) continue;
      std::optional<std::vector<uint8_t>> bytes;
      try {
        bytes = ts[i]->get(k);
      } catch (const Error &e) {
        count(&PrefixCacheStats::store_errors);
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
        const bool damaged = e.status() == Status::bad_snapshot || e.status() == Status::wrong_model;
        if (!damaged) {  // this session's limits or another version's entry: skipped, left for others
          note(std::string(ts[i]->name()) + " entry " + k + " not used: " + e.what());
          continue;
        }
        count(&PrefixCacheStats::refused);
        note(std::string(ts[i]->name()) + " entry " + k + " refused: " + e.what());
        erase_quietly(*ts[i], k);
        continue;
      }
      if (ids.size() != 1) {
        for (int32_t id : ids) session.remove_sequence(id);
        count(&PrefixCacheStats::refused);
        note(std::string(ts[i]->name()) + " entry " + k + " refused: it holds " + std::to_string(ids.size()) + " sequences");
        erase_quietly(*ts[i], k);
        continue;
      }
      const std::vector<int32_t> &got = session.tokens(ids[0]);
      if (static_cast<int64_t>(got.size()) != L || !std::equal(got.begin(), got.end(), tokens.begin())) {
        session.remove_sequence(ids[0]);
        count(&PrefixCacheStats::refused);
        note(std::string(ts[i]->name()) + " entry " + k + " refused: its tokens are not the request's");
        erase_quietly(*ts[i], k);
        continue;
      }
      // Found: the memory tier gets a copy for next time.
      if (memory_ != nullptr && ts[i] != memory_.get()) {
        try {
          memory_->put(ns_, L, k, *bytes);
        } catch (const std::exception &) {  // only a copy for next time
        }
      }
      const std::string n = ts[i]->name();
      {
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.hits;
        stats_.hit_tokens += L;
        ++stats_.hits_by_tier[n == "memory" ? 0 : n == "disk" ? 1 : 2];
      }
      *length = L;
      *tier = n;
      return ids[0];
    }
  }
  return -1;
}

int64_t PrefixCache::longest_local(const std::vector<int32_t> &tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  int64_t best = 0;
  for (PrefixStore *t : {static_cast<PrefixStore *>(memory_.get()), static_cast<PrefixStore *>(disk_.get())}) {
    if (t == nullptr) continue;
    try {
      const std::set<int64_t> lens = t->lengths(ns_);
      for (auto it = lens.rbegin(); it != lens.rend() && *it > best; ++it)
        if (*it < n && *it >= opts_.min_tokens && resumable(*it, n) && t->has(key(*it, tokens))) {
          best = *it;
          break;
        }
    } catch (const Error &) {  // an estimate: a tier that fails counts for nothing
    }
  }
  return best;
}

void PrefixCache::save_at(Session &session, int32_t seq, int64_t length) {
  const std::vector<int32_t> &toks = session.tokens(seq);
  const std::string k = key(length, toks);
  const bool in_memory = memory_ != nullptr && memory_->has(k);
  const bool on_disk = disk_ != nullptr && disk_->has(k);
  if (in_memory || (memory_ == nullptr && on_disk)) return;  // saved before: the tiers behind got it then
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
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(out.bytes()));
  if (memory_ != nullptr) memory_->put(ns_, length, k, *bytes);
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.saves;
  if (!writer_.joinable()) return;
  constexpr int64_t kMaxQueued = int64_t{1} << 30;
  if (queued_bytes_ + static_cast<int64_t>(bytes->size()) > kMaxQueued) {
    ++stats_.store_errors;
    notes_.push_back("the disk/redis writer is over 1 GiB behind: entry " + k + " not saved there");
    if (notes_.size() > 64) notes_.erase(notes_.begin());
    return;
  }
  queued_bytes_ += static_cast<int64_t>(bytes->size());
  jobs_.push_back(Job{k, length, std::move(bytes)});
  cv_.notify_one();
}

void PrefixCache::save(Session &session, int32_t seq, int64_t n) {
  try {
    save_checked(session, seq, n);
  } catch (const std::exception &e) {  // a cache that cannot save (no sequence slot, no memory) only misses later
    note(std::string("prefix not saved: ") + e.what());
  }
}

void PrefixCache::save_checked(Session &session, int32_t seq, int64_t n) {
  if (n <= 0 || n > static_cast<int64_t>(session.tokens(seq).size())) return;
  // Only an uncompressed prefix serves every longer request; a compressed one was shaped by its own end.
  for (const LayerSlots &L : session.kv().seq(seq).layers)
    if (L.n() < n || L.pos[static_cast<size_t>(n - 1)] != n - 1) return;
  const int64_t b = opts_.exact_from > 0 ? n : (n / opts_.boundary) * opts_.boundary;
  if (b >= opts_.min_tokens && b > 0) save_at(session, seq, b);
}

bool PrefixCache::resumable(int64_t L, int64_t n) const {
  if (L <= 0 || L >= n) return false;
  if (opts_.exact_from <= 0) return L % opts_.boundary == 0;
  return n - L >= opts_.exact_from;  // a rest shorter than exact_from would be cut as the whole prompt is not
}

}  // namespace infokv
