// The tiers of the prefix cache (src/engine/prefix_cache.hpp): where compressed snapshots of token prefixes are kept
// between requests, processes and machines. A store holds opaque entries under keys "<namespace>/<length>/<hash>"
// and, per namespace, the prefix lengths it has entries for (so that a lookup knows which prefixes to hash). Entries
// are never trusted: the cache restores them through the snapshot's checks and compares their tokens byte by byte.
#pragma once
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace infokv {

class PrefixStore {
 public:
  virtual ~PrefixStore() = default;
  virtual const char *name() const = 0;
  // The entry under `key`, or nullopt when there is none. Throws Error(io) when the store cannot be reached, times
  // out or answers out of protocol.
  virtual std::optional<std::vector<uint8_t>> get(const std::string &key) = 0;
  // Stores an entry whole or not at all (a crash or a full disk leaves no half-written entry); evicts older entries
  // past the store's size limit. Throws Error(io).
  virtual void put(const std::string &ns, int64_t length, const std::string &key, const std::vector<uint8_t> &bytes) = 0;
  virtual void erase(const std::string &key) = 0;
  // Whether an entry is stored under `key` (cheaper than get). Throws Error(io) as get does.
  virtual bool has(const std::string &key) = 0;
  // The prefix lengths with entries in namespace `ns` (may include lengths whose entries were evicted since).
  virtual std::set<int64_t> lengths(const std::string &ns) = 0;
};

// In this process's memory, least recently used evicted first past max_bytes.
class MemoryPrefixStore final : public PrefixStore {
 public:
  explicit MemoryPrefixStore(int64_t max_bytes) : max_bytes_(max_bytes) {}
  const char *name() const override { return "memory"; }
  std::optional<std::vector<uint8_t>> get(const std::string &key) override;
  void put(const std::string &ns, int64_t length, const std::string &key, const std::vector<uint8_t> &bytes) override;
  void erase(const std::string &key) override;
  bool has(const std::string &key) override;
  std::set<int64_t> lengths(const std::string &ns) override;
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::string ns;
    int64_t length;
    std::vector<uint8_t> bytes;
    std::list<std::string>::iterator lru;
  };
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recent first
};

// A directory: one file per entry, <dir>/<ns>/<length>-<hash>.ikvs, written atomically (a temporary renamed into
// place); the oldest files (by modification time) are removed past max_bytes.
class DiskPrefixStore final : public PrefixStore {
 public:
  DiskPrefixStore(std::string dir, int64_t max_bytes);
  const char *name() const override { return "disk"; }
  std::optional<std::vector<uint8_t>> get(const std::string &key) override;
  void put(const std::string &ns, int64_t length, const std::string &key, const std::vector<uint8_t> &bytes) override;
  void erase(const std::string &key) override;
  bool has(const std::string &key) override;
  std::set<int64_t> lengths(const std::string &ns) override;

 private:
  std::string path_of(const std::string &key) const;
  std::string dir_;
  int64_t max_bytes_;
};

// A Redis or Valkey server shared by many processes and machines (hiredis): entries are string values set with an
// expiry (ttl_s), lengths a set per namespace; eviction is the server's own (maxmemory with an LRU policy). Every
// command has `timeout_s`; a server that is down, slow or answers garbage is an Error(io), and after one the store
// waits `retry_s` before it tries the server again (so that a dead store costs one timeout, not one per request).
class RedisPrefixStore final : public PrefixStore {
 public:
  // address: "host:port" or "unix:/path/to/socket".
  RedisPrefixStore(std::string address, double timeout_s = 0.5, int64_t ttl_s = 7 * 24 * 3600, double retry_s = 5.0);
  ~RedisPrefixStore() override;
  const char *name() const override { return "redis"; }
  std::optional<std::vector<uint8_t>> get(const std::string &key) override;
  void put(const std::string &ns, int64_t length, const std::string &key, const std::vector<uint8_t> &bytes) override;
  void erase(const std::string &key) override;
  bool has(const std::string &key) override;
  std::set<int64_t> lengths(const std::string &ns) override;

 private:
  struct Conn;
  Conn &conn();  // connected, or throws Error(io)
  void drop(const std::string &why);  // closes the connection after a failure and throws Error(io)
  std::string address_;
  double timeout_s_, retry_s_;
  int64_t ttl_s_;
  std::unique_ptr<Conn> c_;
  double down_until_ = 0;  // steady-clock seconds before which the server is not tried again
};

}  // namespace infokv
