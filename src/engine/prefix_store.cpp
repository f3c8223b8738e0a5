#include "engine/prefix_store.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/byte_io.hpp"
#include "util/error.hpp"

namespace infokv {

namespace fs = std::filesystem;

// ---- memory ----

std::optional<std::vector<uint8_t>> MemoryPrefixStore::get(const std::string &key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.bytes;
}

void MemoryPrefixStore::put(const std::string &ns, int64_t length, const std::string &key, const std::vector<uint8_t> &bytes) {
  if (static_cast<int64_t>(bytes.size()) > max_bytes_) return;  // larger than the tier: not kept here
  erase(key);
  while (bytes_ + static_cast<int64_t>(bytes.size()) > max_bytes_ && !lru_.empty()) erase(lru_.back());
  lru_.push_front(key);
  entries_[key] = Entry{ns, length, bytes, lru_.begin()};
  bytes_ += static_cast<int64_t>(bytes.size());
}

void MemoryPrefixStore::erase(const std::string &key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  bytes_ -= static_cast<int64_t>(it->second.bytes.size());
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

bool MemoryPrefixStore::has(const std::string &key) { return entries_.count(key) != 0; }

std::set<int64_t> MemoryPrefixStore::lengths(const std::string &ns) {
  std::set<int64_t> out;
  for (const auto &kv : entries_)
    if (kv.second.ns == ns) out.insert(kv.second.length);
  return out;
}

// ---- disk ----

DiskPrefixStore::DiskPrefixStore(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_, ec)) fail(Status::io, "prefix cache directory '" + dir_ + "' cannot be made");
}

// key "<ns>/<length>/<hash>" -> <dir>/<ns>/<length>-<hash>.ikvs (the parts are hex and digits: no path tricks).
std::string DiskPrefixStore::path_of(const std::string &key) const {
  const size_t a = key.find('/'), b = key.find('/', a + 1);
  if (a == std::string::npos || b == std::string::npos) fail(Status::internal, "bad prefix cache key " + key);
  return dir_ + "/" + key.substr(0, a) + "/" + key.substr(a + 1, b - a - 1) + "-" + key.substr(b + 1) + ".ikvs";
}

std::optional<std::vector<uint8_t>> DiskPrefixStore::get(const std::string &key) {
  const std::string p = path_of(key);
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;  // gone since (evicted by another writer)
  const std::streamoff size = in.tellg();
  if (size < 0 || size > (std::streamoff{1} << 40)) fail(Status::io, "cannot size " + p);
  in.seekg(0);
  std::vector<uint8_t> out(static_cast<size_t>(size));
  in.read(reinterpret_cast<char *>(out.data()), static_cast<std::streamsize>(out.size()));
  if (in.gcount() != static_cast<std::streamsize>(out.size())) fail(Status::io, "short read of " + p);
  fs::last_write_time(p, fs::file_time_type::clock::now(), ec);  // recently used: evicted last
  return out;
}

void DiskPrefixStore::put(const std::string &, int64_t, const std::string &key, const std::vector<uint8_t> &bytes) {
  if (static_cast<int64_t>(bytes.size()) > max_bytes_) return;
  const std::string p = path_of(key);
  std::error_code ec;
  fs::create_directories(fs::path(p).parent_path(), ec);
  // Make room first: the oldest entries of every namespace go until this one fits.
  // Only entries count and go: <16 hex digits>/<digits>-<16 hex digits>.ikvs (never a user's own files).
  auto hex16 = [](const std::string &x) {
    return x.size() == 16 && x.find_first_not_of("0123456789abcdef") == std::string::npos;
  };
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  int64_t total = 0;
  for (auto d = fs::directory_iterator(dir_, ec); !ec && d != fs::directory_iterator(); d.increment(ec)) {
    if (!d->is_directory(ec) || !hex16(d->path().filename().string())) continue;
    std::error_code ec2;
    for (auto it = fs::directory_iterator(d->path(), ec2); !ec2 && it != fs::directory_iterator(); it.increment(ec2)) {
      const std::string n = it->path().filename().string();
      const size_t dash = n.find('-');
      if (!it->is_regular_file(ec2) || it->path().extension() != ".ikvs" || dash == std::string::npos || dash == 0 ||
          n.find_first_not_of("0123456789") != dash || !hex16(n.substr(dash + 1, n.size() - dash - 1 - 5)))
        continue;
      total += static_cast<int64_t>(it->file_size(ec2));
      files.emplace_back(it->last_write_time(ec2), it->path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto &f : files) {
    if (total + static_cast<int64_t>(bytes.size()) <= max_bytes_) break;
    const int64_t sz = static_cast<int64_t>(fs::file_size(f.second, ec));
    if (fs::remove(f.second, ec)) total -= sz;
  }
  FileSink out(p);  // a temporary, renamed over p on commit: never half an entry
  out.write(bytes.data(), bytes.size());
  out.commit();
}

void DiskPrefixStore::erase(const std::string &key) {
  std::error_code ec;
  fs::remove(path_of(key), ec);
}

bool DiskPrefixStore::has(const std::string &key) {
  std::error_code ec;
  return fs::is_regular_file(path_of(key), ec);
}

std::set<int64_t> DiskPrefixStore::lengths(const std::string &ns) {
  std::set<int64_t> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_ + "/" + ns, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (it->path().extension() != ".ikvs") continue;
    char *end = nullptr;
    const long long L = std::strtoll(n.c_str(), &end, 10);
    if (end != nullptr && *end == '-' && L > 0) out.insert(L);
  }
  return out;
}

// ---- redis ----

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
timeval tv_of(double s) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}
struct ReplyPtr {
  redisReply *r = nullptr;
  ~ReplyPtr() {
    if (r != nullptr) freeReplyObject(r);
  }
};
}  // namespace

struct RedisPrefixStore::Conn {
  redisContext *c = nullptr;
  ~Conn() {
    if (c != nullptr) redisFree(c);
  }
};

RedisPrefixStore::RedisPrefixStore(std::string address, double timeout_s, int64_t ttl_s, double retry_s)
    : address_(std::move(address)), timeout_s_(timeout_s), retry_s_(retry_s), ttl_s_(ttl_s) {
  if (address_.empty()) fail(Status::invalid_argument, "redis address is empty");
  if (!(timeout_s > 0)) fail(Status::invalid_argument, "redis timeout must be positive");
}

RedisPrefixStore::~RedisPrefixStore() = default;

void RedisPrefixStore::drop(const std::string &why) {
  c_.reset();
  down_until_ = now_s() + retry_s_;
  fail(Status::io, "redis " + address_ + ": " + why);
}

RedisPrefixStore::Conn &RedisPrefixStore::conn() {
  if (c_ != nullptr) return *c_;
  if (now_s() < down_until_) fail(Status::io, "redis " + address_ + " failed recently; not retried yet");
  auto c = std::make_unique<Conn>();
  if (address_.rfind("unix:", 0) == 0) {
    c->c = redisConnectUnixWithTimeout(address_.substr(5).c_str(), tv_of(timeout_s_));
  } else {
    const size_t colon = address_.rfind(':');
    const std::string host = colon == std::string::npos ? address_ : address_.substr(0, colon);
    const int port = colon == std::string::npos ? 6379 : std::atoi(address_.c_str() + colon + 1);
    c->c = redisConnectWithTimeout(host.c_str(), port, tv_of(timeout_s_));
  }
  if (c->c == nullptr) drop("cannot allocate a connection");
  if (c->c->err != 0) drop(std::string("cannot connect: ") + c->c->errstr);
  if (redisSetTimeout(c->c, tv_of(timeout_s_)) != REDIS_OK) drop("cannot set the timeout");
  c_ = std::move(c);
  return *c_;
}

std::optional<std::vector<uint8_t>> RedisPrefixStore::get(const std::string &key) {
  Conn &c = conn();
  ReplyPtr r{static_cast<redisReply *>(redisCommand(c.c, "GET %b", key.data(), key.size()))};
  if (r.r == nullptr) drop(std::string("GET failed: ") + c.c->errstr);
  if (r.r->type == REDIS_REPLY_NIL) return std::nullopt;
  if (r.r->type != REDIS_REPLY_STRING) drop("GET answered type " + std::to_string(r.r->type));
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t *>(r.r->str), reinterpret_cast<const uint8_t *>(r.r->str) + r.r->len);
}

void RedisPrefixStore::put(const std::string &ns, int64_t length, const std::string &key, const std::vector<uint8_t> &bytes) {
  Conn &c = conn();
  // SET is atomic: a reader sees the whole entry or none. The length joins its namespace's set afterwards.
  ReplyPtr r{static_cast<redisReply *>(redisCommand(c.c, "SET %b %b EX %lld", key.data(), key.size(), bytes.data(),
                                                    bytes.size(), static_cast<long long>(ttl_s_)))};
  if (r.r == nullptr) drop(std::string("SET failed: ") + c.c->errstr);
  if (r.r->type == REDIS_REPLY_ERROR) fail(Status::io, "redis " + address_ + ": SET refused: " + std::string(r.r->str, r.r->len));
  const std::string set = "infokv-lengths:" + ns;
  ReplyPtr s{static_cast<redisReply *>(redisCommand(c.c, "SADD %b %lld", set.data(), set.size(), static_cast<long long>(length)))};
  if (s.r == nullptr) drop(std::string("SADD failed: ") + c.c->errstr);
}

void RedisPrefixStore::erase(const std::string &key) {
  Conn &c = conn();
  ReplyPtr r{static_cast<redisReply *>(redisCommand(c.c, "DEL %b", key.data(), key.size()))};
  if (r.r == nullptr) drop(std::string("DEL failed: ") + c.c->errstr);
}

bool RedisPrefixStore::has(const std::string &key) {
  Conn &c = conn();
  ReplyPtr r{static_cast<redisReply *>(redisCommand(c.c, "EXISTS %b", key.data(), key.size()))};
  if (r.r == nullptr) drop(std::string("EXISTS failed: ") + c.c->errstr);
  if (r.r->type != REDIS_REPLY_INTEGER) drop("EXISTS answered type " + std::to_string(r.r->type));
  return r.r->integer > 0;
}

std::set<int64_t> RedisPrefixStore::lengths(const std::string &ns) {
  Conn &c = conn();
  const std::string set = "infokv-lengths:" + ns;
  ReplyPtr r{static_cast<redisReply *>(redisCommand(c.c, "SMEMBERS %b", set.data(), set.size()))};
  if (r.r == nullptr) drop(std::string("SMEMBERS failed: ") + c.c->errstr);
  if (r.r->type != REDIS_REPLY_ARRAY) drop("SMEMBERS answered type " + std::to_string(r.r->type));
  std::set<int64_t> out;
  for (size_t i = 0; i < r.r->elements; ++i) {
    const redisReply *e = r.r->element[i];
    if (e == nullptr || e->type != REDIS_REPLY_STRING) continue;
    const long long L = std::strtoll(std::string(e->str, e->len).c_str(), nullptr, 10);
    if (L > 0 && L < (int64_t{1} << 40)) out.insert(L);
  }
  return out;
}

}  // namespace infokv
