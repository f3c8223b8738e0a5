// The prefix cache (DESIGN.md §9, "Reuse"): snapshots of token prefixes, so that a request whose tokens start with a
// cached prefix starts from its snapshot instead of prefilling it. Entries are keyed by a namespace (the model's
// weight and tokenizer fingerprints, the KV dtype and block size, and the compression configuration they were made
// under), the prefix length and a hash of its tokens, and live in tiers: this process's memory, a disk directory,
// and a Redis/Valkey server shared by many processes and machines. A hit is restored through the snapshot's own
// checks and its tokens compared with the request's byte by byte; an entry that fails either is erased and reported,
// never used. A store that is down, slow or answers garbage is reported and skipped (the request is prefilled).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/prefix_store.hpp"
#include "session/session.hpp"

namespace infokv {

struct PrefixCacheOptions {
  int64_t memory_bytes = int64_t{256} << 20;  // 0: no memory tier
  std::string disk_dir;                        // empty: no disk tier
  int64_t disk_bytes = int64_t{4} << 30;
  std::string redis;                           // "host:port" or "unix:/path"; empty: no shared tier
  double redis_timeout_s = 0.5;
  // Prefixes shorter than this are not cached (a snapshot's fixed cost beats prefilling a few tokens).
  int64_t min_tokens = 64;
  // How prefill cuts a prompt (the engine sets both): in chunks of `boundary` tokens (the session's ubatch) from its
  // start, and a message of `exact_from` tokens or more computes the same bits however it is cut
  // (Session::cut_invariant_from; 0: only the same cuts do). An entry is used only where the request's remaining
  // tokens, prefilled from it, compute exactly what the whole prompt prefilled from the start computes: with
  // exact_from > 0 at any length that leaves at least exact_from tokens, and entries are saved at the lengths asked
  // for (the caller vouches that those tokens were prefilled as such a message); with exact_from == 0 only at
  // multiples of boundary, and saves are rounded down to one.
  int64_t boundary = 256;
  int64_t exact_from = 0;
};

struct PrefixCacheStats {
  int64_t lookups = 0, hits = 0, saves = 0, refused = 0, store_errors = 0;
  int64_t hit_tokens = 0;
  int64_t hits_by_tier[3] = {0, 0, 0};  // memory, disk, redis
};

class PrefixCache {
 public:
  // Throws Error(io) when the disk directory cannot be made; a Redis server is only contacted when used.
  PrefixCache(const PrefixCacheOptions &opts, const Session &session);
  // Finishes the writes still queued (see save).
  ~PrefixCache();
  PrefixCache(const PrefixCache &) = delete;
  PrefixCache &operator=(const PrefixCache &) = delete;

  // Restores the longest cached prefix of `tokens` shorter than all of them (and resumable: see boundary) into
  // `session` as a new sequence and returns its id, or -1 when none is cached (or none could be used: the reasons go
  // to notes()). *length: the prefix's length; *tier: where it was found. Lengths are tried longest first, each in
  // the tiers that list it; Redis is asked for its kMaxRedisProbes longest only (a round trip each). Throws
  // Error(kv_full) when a hit does not fit the pool (nothing changed).
  int32_t restore_longest(Session &session, const std::vector<int32_t> &tokens, int64_t *length, std::string *tier);
  // The length restore_longest would most likely restore from the tiers on this machine (memory and disk; Redis is
  // not asked: a round trip), 0 when they hold none. A cost estimate, not a promise: an entry may be evicted or
  // refused by then. Counts no lookup; a tier that fails is skipped.
  int64_t longest_local(const std::vector<int32_t> &tokens);
  // Saves the first `length` tokens of sequence `seq` of `session` (rounded down to a multiple of boundary when
  // exact_from == 0) when they are uncompressed, unless already stored. The snapshot is made here; the memory tier takes it at once, and a writer
  // thread hands it to the disk and Redis tiers, so that requests never wait for their I/O. Store failures are
  // reported in notes(), never thrown.
  void save(Session &session, int32_t seq, int64_t length);
  // Waits until the writer thread has stored everything queued.
  void flush();

  // Whether a request of n tokens resumed from a cached prefix of L < n tokens computes exactly what it computes
  // prefilled from the start (see PrefixCacheOptions::boundary).
  bool resumable(int64_t L, int64_t n) const;
  static constexpr int kMaxRedisProbes = 64;

  PrefixCacheStats stats() const;
  // What went wrong with stores and entries, oldest first (the latest 64).
  std::vector<std::string> notes() const;
  const std::string &ns() const { return ns_; }
  std::vector<PrefixStore *> tiers() const;

 private:
  std::string key(int64_t length, const std::vector<int32_t> &tokens) const;
  void note(const std::string &s);
  void save_checked(Session &session, int32_t seq, int64_t length);
  void save_at(Session &session, int32_t seq, int64_t length);
  void write_loop();

  struct Job {
    std::string key;
    int64_t length = 0;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
  };
  PrefixCacheOptions opts_;
  std::string ns_;
  std::unique_ptr<MemoryPrefixStore> memory_;
  std::unique_ptr<DiskPrefixStore> disk_;
  std::unique_ptr<RedisPrefixStore> redis_;
  // The writer thread's own stores (a Redis connection is used by one thread).
  std::unique_ptr<DiskPrefixStore> wdisk_;
  std::unique_ptr<RedisPrefixStore> wredis_;
  mutable std::mutex mu_;  // guards what follows
  std::condition_variable cv_, idle_;
  std::deque<Job> jobs_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  PrefixCacheStats stats_;
  std::vector<std::string> notes_;
  std::thread writer_;
};

}  // namespace infokv
