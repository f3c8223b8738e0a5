// The prefix cache (src/engine/prefix_cache.hpp) in each tier: a conversation whose prompt starts with a cached
// prefix starts from its snapshot and answers exactly as one prefilled from scratch; entries that are damaged or not
// the request's are refused and erased; a Redis server that is down, silent or garbled is skipped with a note. The
// Redis tier runs against a real redis-server from Debian's package, started here on loopback (never a mock).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "engine/engine.hpp"
#include "support/random_inputs.hpp"
#include "support/smollm2_model.hpp"
#include "support/stories_model.hpp"
#include "util/error.hpp"

using namespace infokv;
namespace fs = std::filesystem;

namespace {

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(s, reinterpret_cast<sockaddr *>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr *>(&a), &n);
  ::close(s);
  return ntohs(a.sin_port);
}

std::string redis_server_path() {
  for (const char *p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/bin/valkey-server"})
    if (fs::exists(p)) return p;
  return "";
}

// A redis-server on 127.0.0.1 with a temp dir, no persistence, 64 MiB with LRU eviction; stopped at the end.
struct RedisServer {
  pid_t pid = -1;
  int port = 0;
  std::string dir;
  bool up = false;
  RedisServer() {
    const std::string exe = redis_server_path();
    if (exe.empty()) return;
    port = free_port();
    dir = (fs::temp_directory_path() / ("infokv-redis-" + std::to_string(::getpid()) + "-" + std::to_string(port))).string();
    fs::create_directories(dir);
    const std::string p = std::to_string(port);  // made before fork: the child only calls execl and _exit
    pid = ::fork();
    if (pid == 0) {
      ::execl(exe.c_str(), exe.c_str(), "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--dir", dir.c_str(), "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru", "--loglevel", "warning",
              static_cast<char *>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 100 && !up; ++i) {
      timeval tv{0, 200000};
      redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
      if (c != nullptr && c->err == 0) {
        redisReply *r = static_cast<redisReply *>(redisCommand(c, "PING"));
        up = r != nullptr && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
      }
      if (c) redisFree(c);
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  // Sets every infokv entry's value to garbage of the same length.
  void garble() {
    timeval tv{1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *keys = static_cast<redisReply *>(redisCommand(c, "KEYS */*/*"));
    for (size_t i = 0; keys != nullptr && i < keys->elements; ++i) {
      std::string junk(4096, 'x');
      redisReply *r = static_cast<redisReply *>(
          redisCommand(c, "SET %b %b", keys->element[i]->str, keys->element[i]->len, junk.data(), junk.size()));
      if (r) freeReplyObject(r);
    }
    if (keys) freeReplyObject(keys);
    redisFree(c);
  }
};

#define REQUIRE_REDIS(srv)                                                                                          \
  RedisServer srv;                                                                                                  \
  ASSERT_FALSE(redis_server_path().empty()) << "redis-server is missing: run packaging/setup.sh (Debian: redis-server)"; \
  ASSERT_TRUE(srv.up) << "redis-server did not start on port " << srv.port

std::vector<int32_t> tokens(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t{1};
  while (t.size() < n) t.push_back(3 + static_cast<int32_t>(rng() % 500));
  return t;
}

EngineOptions options(bool cache) {
  EngineOptions o;
  o.session.n_threads = 2;
  o.session.kv_dtype = KvDtype::f32;
  o.session.kv_pool_blocks = 600;
  o.assume_prefill_tokens_per_s = 5000;
  o.assume_disk_bytes_per_s = 1e9;
  o.prefix_cache = cache;
  o.prefix.memory_bytes = 0;
  o.prefix.min_tokens = 32;
  o.session.ubatch = 64;  // the prefix cache's entries are multiples of the prefill chunk
  o.prefix.redis_timeout_s = 0.2;
  return o;
}

std::vector<int32_t> answer(Engine &e, const std::vector<int32_t> &prompt, int32_t n = 12) {
  const int64_t c = e.open();
  e.submit(c, {prompt, n, {}, {}});
  while (e.busy()) e.step();
  EXPECT_EQ(e.state(c), TurnState::done) << e.failure(c);
  std::vector<int32_t> g = e.generated(c);
  e.close(c);
  return g;
}

struct TempDir {
  std::string path;
  TempDir() {
    path = (fs::temp_directory_path() / ("infokv-prefix-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(infokv_test::test_seed()) + "-" + std::to_string(rand())))
               .string();
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(PrefixCache, DiskHitStartsFromTheSnapshotAndAnswersExactly) {
  const auto shared = tokens(infokv_test::test_seed(), 150);
  auto a = shared, b = shared;
  for (int i = 0; i < 20; ++i) a.push_back(7 + i), b.push_back(40 + i);
  Engine ref(infokv_test::stories_model(), options(false));
  const auto want_a = answer(ref, a), want_b = answer(ref, b);
  TempDir dir;
  EngineOptions o = options(true);
  o.prefix.disk_dir = dir.path;
  // Where prefill does not depend on its cuts (x86 with AVX-512), entries lie at any length: 170 tokens give entries
  // at the prompt's end and at 128, the last chunk boundary; elsewhere at 128 only.
  const bool any_length = ref.session().cut_invariant_from() > 0;
  {
    Engine first(infokv_test::stories_model(), o);
    EXPECT_EQ(answer(first, a), want_a);
    EXPECT_EQ(first.prefix_cache()->stats().saves, any_length ? 2 : 1);
  }
  Engine second(infokv_test::stories_model(), o);  // another process, the same directory
  EXPECT_EQ(answer(second, b), want_b);            // shares the first 150 tokens: the entry at 128 hits
  EXPECT_EQ(second.stats().prefix_hits, 1);
  EXPECT_EQ(second.stats().prefix_hit_tokens, 128);
  EXPECT_EQ(second.prefix_cache()->stats().hits_by_tier[1], 1);
  // a's prompt and more (its next turn, sent whole): the entry at 170 hits (elsewhere the one at 128)
  const std::vector<int32_t> a_more = [&] {
    std::vector<int32_t> t = a;
    for (int i = 0; i < 30; ++i) t.push_back(100 + i);
    return t;
  }();
  EXPECT_EQ(answer(second, a_more), answer(ref, a_more));
  EXPECT_EQ(second.stats().prefix_hit_tokens, 128 + (any_length ? 170 : 128));
  // Bit for bit: the logits after a hit are those of a full prefill (the rest is prefilled in the same chunks).
}

TEST(PrefixCache, AHitGivesTheSameLogitsAsAFullPrefill) {
  const auto shared = tokens(infokv_test::test_seed() + 9, 200);
  TempDir dir;
  EngineOptions o = options(true);
  o.prefix.disk_dir = dir.path;
  std::vector<float> want, got;
  auto first_logits = [](Engine &e, const std::vector<int32_t> &p, std::vector<float> &out) {
    const int64_t c = e.open();
    e.submit(c, {p, 1, {}, {}});
    while (e.busy())
      for (const TokenEvent &ev : e.step()) out = *ev.logits;
    e.close(c);
  };
  {
    Engine cold(infokv_test::stories_model(), o);
    first_logits(cold, shared, want);
  }
  Engine warm(infokv_test::stories_model(), o);
  first_logits(warm, shared, got);
  EXPECT_EQ(warm.stats().prefix_hits, 1);
  EXPECT_EQ(got, want);
}

// Entries at any length (not only at multiples of the prefill chunk) where the backend computes each token of a
// prefill piece of cut_invariant_from() tokens or more on its own: a request resumed from one, leaving at least that
// many tokens, gets the very logits of a full prefill, on a quantised model too (SmolLM2 Q4_1, whose products pick
// kernels by the number of tokens) and past the attention's 1024-slot split. A rest shorter than that is not resumed.
TEST(PrefixCache, AnEntryAtAnyLengthResumesExactlyWhereTheBackendPromisesIt) {
  for (const bool quantised : {false, true}) {
    std::shared_ptr<const Model> m = quantised ? infokv_test::smollm2() : infokv_test::stories_model();
    ASSERT_NE(m, nullptr) << "SmolLM2 GGUF " << infokv_test::smollm2_path()
                          << " is missing: run packaging/fetch_models.sh (or set INFOKV_SMOLLM2)";
    EngineOptions o = options(true);
    o.prefix.memory_bytes = int64_t{256} << 20;
    o.session.kv_pool_blocks = quantised ? 2000 : 1200;
    auto first_logits = [](Engine &e, const std::vector<int32_t> &p, const std::vector<int64_t> &saves) {
      std::vector<float> out;
      const int64_t c = e.open();
      Turn t{p, 1, {}, saves};
      e.submit(c, t);
      while (e.busy())
        for (const TokenEvent &ev : e.step()) out = *ev.logits;
      e.close(c);
      return out;
    };
    EngineOptions plain = options(false);
    plain.session.kv_pool_blocks = o.session.kv_pool_blocks;
    Engine probe(m, plain);
    const int64_t from = probe.session().cut_invariant_from();
    if (from == 0) GTEST_SKIP() << "this CPU gives no cut-invariant prefill (no AVX-512): entries lie on chunk multiples";
    for (const int len : {150, 1100}) {
      if (quantised && len > 150) continue;  // the 1024 split is covered on the small model
      const auto shared = tokens(infokv_test::test_seed() + 40 + static_cast<uint32_t>(len), static_cast<size_t>(len));
      std::vector<int32_t> asked = shared;
      for (int i = 0; i < 23; ++i) asked.push_back(9 + i);  // 23 more: a rest of 23 after the entry at len
      Engine ref(m, plain);
      const std::vector<float> want = first_logits(ref, asked, {});
      Engine e(m, o);
      first_logits(e, shared, {static_cast<int64_t>(len) - 37});  // saves at len - 37, len, and the chunk point
      ASSERT_GE(e.prefix_cache()->stats().saves, 2);
      const std::vector<float> got = first_logits(e, asked, {});
      EXPECT_EQ(e.stats().prefix_hit_tokens, len) << "len " << len << (quantised ? " SmolLM2" : " stories");
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << "len " << len;
      // The shared part plus fewer than `from` tokens: the entry at len would leave a short rest, so an earlier
      // one (len - 37) serves instead, and the logits are still a full prefill's.
      std::vector<int32_t> short_rest = shared;
      short_rest.push_back(5);
      const std::vector<float> want2 = first_logits(ref, short_rest, {});
      const int64_t before = e.stats().prefix_hit_tokens;
      const std::vector<float> got2 = first_logits(e, short_rest, {});
      EXPECT_LE(e.stats().prefix_hit_tokens - before, static_cast<int64_t>(short_rest.size()) - from);
      EXPECT_GT(e.stats().prefix_hit_tokens - before, 0);
      EXPECT_EQ(0, std::memcmp(got2.data(), want2.data(), want2.size() * sizeof(float))) << "len " << len;
    }
  }
}

// A turn's save points (infokv serve passes the end of the system turn): a second conversation that shares only
// that prefix starts from it.
TEST(PrefixCache, ATurnsSavePointServesEveryRequestThatSharesItsStart) {
  const auto system = tokens(infokv_test::test_seed() + 50, 90);
  auto a = system, b = system;
  for (int i = 0; i < 40; ++i) a.push_back(200 + i), b.push_back(300 + i);
  EngineOptions o = options(true);
  o.prefix.memory_bytes = int64_t{64} << 20;
  Engine probe(infokv_test::stories_model(), options(false));
  if (probe.session().cut_invariant_from() == 0) GTEST_SKIP() << "this CPU gives no cut-invariant prefill (no AVX-512)";
  Engine ref(infokv_test::stories_model(), options(false));
  const auto want_b = answer(ref, b);
  Engine e(infokv_test::stories_model(), o);
  const int64_t c = e.open();
  e.submit(c, Turn{a, 4, {}, {90}});
  while (e.busy()) e.step();
  e.close(c);
  EXPECT_EQ(answer(e, b), want_b);
  EXPECT_EQ(e.stats().prefix_hit_tokens, 90);
}

TEST(PrefixCache, DamagedOrForeignEntriesAreRefusedAndErased) {
  const auto a = tokens(infokv_test::test_seed() + 1, 140);
  Engine ref(infokv_test::stories_model(), options(false));
  const auto want = answer(ref, a);
  TempDir dir;
  EngineOptions o = options(true);
  o.prefix.disk_dir = dir.path;
  {
    Engine first(infokv_test::stories_model(), o);
    answer(first, a);
  }
  int flipped = 0;
  for (const auto &f : fs::recursive_directory_iterator(dir.path)) {
    if (!f.is_regular_file()) continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f.path()) * 2 / 3));
    const char x = 0x33;
    io.write(&x, 1);
    ++flipped;
  }
  ASSERT_GE(flipped, 1);
  Engine second(infokv_test::stories_model(), o);
  EXPECT_EQ(answer(second, a), want);
  EXPECT_EQ(second.stats().prefix_hits, 0);
  EXPECT_GE(second.prefix_cache()->stats().refused, 1);
  ASSERT_FALSE(second.prefix_cache()->notes().empty());
  EXPECT_NE(second.prefix_cache()->notes()[0].find("refused"), std::string::npos) << second.prefix_cache()->notes()[0];
}

TEST(PrefixCache, RedisIsSharedBetweenEnginesAndItsFaultsOnlyCostAPrefill) {
  REQUIRE_REDIS(srv);
  const auto a = tokens(infokv_test::test_seed() + 2, 160);
  Engine ref(infokv_test::stories_model(), options(false));
  const auto want = answer(ref, a);
  EngineOptions o = options(true);
  o.prefix.redis = srv.address();
  {
    Engine first(infokv_test::stories_model(), o);
    EXPECT_EQ(answer(first, a), want);
    EXPECT_EQ(first.prefix_cache()->stats().store_errors, 0) << first.prefix_cache()->notes().back();
  }
  {
    Engine second(infokv_test::stories_model(), o);
    EXPECT_EQ(answer(second, a), want);
    EXPECT_EQ(second.prefix_cache()->stats().hits_by_tier[2], 1);
  }
  srv.garble();
  {
    Engine third(infokv_test::stories_model(), o);
    EXPECT_EQ(answer(third, a), want);
    EXPECT_EQ(third.stats().prefix_hits, 0);
    EXPECT_GE(third.prefix_cache()->stats().refused, 1);
  }
  srv.stop();  // the store is down
  {
    const auto t0 = std::chrono::steady_clock::now();
    Engine fourth(infokv_test::stories_model(), o);
    EXPECT_EQ(answer(fourth, a), want);
    EXPECT_GE(fourth.prefix_cache()->stats().store_errors, 1);
    ASSERT_FALSE(fourth.prefix_cache()->notes().empty());
    EXPECT_NE(fourth.prefix_cache()->notes()[0].find("redis"), std::string::npos);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  }
}

// A real server that stops answering while the engine holds a connection to it (SIGSTOP: a server swapped out, a
// stalled host): the lookup waits one timeout and the prompt is prefilled, with the same answer; the server, resumed,
// serves the entry to the next engine.
TEST(PrefixCache, AStoreThatStopsAnsweringMidwayCostsOneTimeoutAndAPrefill) {
  REQUIRE_REDIS(srv);
  const auto a = tokens(infokv_test::test_seed() + 4, 160);
  Engine ref(infokv_test::stories_model(), options(false));
  const auto want = answer(ref, a);
  EngineOptions o = options(true);
  o.prefix.redis = srv.address();
  {
    Engine maker(infokv_test::stories_model(), o);
    EXPECT_EQ(answer(maker, a), want);
  }  // its writer has put the entry in Redis
  {
    Engine e(infokv_test::stories_model(), o);
    const auto other = tokens(infokv_test::test_seed() + 5, 20);  // under min_tokens: looked up, never saved
    EXPECT_EQ(answer(e, other), answer(ref, other));  // the lookup opened the engine's connection
    ASSERT_EQ(e.prefix_cache()->stats().store_errors, 0) << e.prefix_cache()->notes().back();
    ASSERT_EQ(::kill(srv.pid, SIGSTOP), 0);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(answer(e, a), want);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
    EXPECT_EQ(e.stats().prefix_hits, 0);
    EXPECT_GE(e.prefix_cache()->stats().store_errors, 1);
    ASSERT_FALSE(e.prefix_cache()->notes().empty());
    EXPECT_NE(e.prefix_cache()->notes()[0].find("redis"), std::string::npos) << e.prefix_cache()->notes()[0];
  }  // its writer's requests time out too, each once

  ASSERT_EQ(::kill(srv.pid, SIGCONT), 0);
  Engine next(infokv_test::stories_model(), o);
  EXPECT_EQ(answer(next, a), want);
  EXPECT_EQ(next.prefix_cache()->stats().hits_by_tier[2], 1);
}

TEST(PrefixCache, ASilentStoreTimesOutAndIsSkipped) {
  // A listener that never answers: connections complete in the kernel's backlog, replies never come.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(s, 16), 0);
  socklen_t n = sizeof addr;
  ::getsockname(s, reinterpret_cast<sockaddr *>(&addr), &n);
  const auto a = tokens(infokv_test::test_seed() + 3, 100);
  Engine ref(infokv_test::stories_model(), options(false));
  const auto want = answer(ref, a);
  EngineOptions o = options(true);
  o.prefix.redis = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  Engine e(infokv_test::stories_model(), o);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(answer(e, a), want);
  EXPECT_EQ(answer(e, a), want);  // the second lookup does not wait again: the store is marked down for a while
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_GE(e.prefix_cache()->stats().store_errors, 1);
  ::close(s);
}

}  // namespace
