// Session limits: an explicit KV pool larger than the device can hold is refused up front (not an OOM kill
// later), per-sequence host memory outside the pool is counted in the stats, and max_sequences bounds add, fork
// and restore, each refusal changing nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compress/policy_table.hpp"
#include "sampling/sampler.hpp"
#include "session/session.hpp"
#include "util/byte_io.hpp"
#include "snapshot/snapshot.hpp"
#include "support/snapshot.hpp"
#include "support/util.hpp"
#include "util/error.hpp"
#include "util/sys_memory.hpp"

namespace {

using infokv::Error;
using infokv::Session;
using infokv::SessionOptions;
using infokv::Status;
using infokv_test::session_opts;
using infokv_test::stories_model;

using infokv_test::status_of;

TEST(SessionLimits, ExplicitPoolLargerThanPhysicalMemoryIsOutOfMemory) {
  const int64_t phys = infokv::physical_memory_bytes();
  ASSERT_GT(phys, 0);
  SessionOptions o = session_opts();
  o.block_size = 1024;  // big blocks keep the count under the 2^26 cap on any machine below 8 TiB
  o.kv_pool_blocks = 0;
  const infokv::HParams &hp = stories_model()->hparams();
  const int64_t block_bytes = int64_t{2} * hp.n_head_kv * o.block_size * hp.head_dim * 2;
  for (int64_t blocks : {phys / block_bytes + 1, int64_t{1} << 26}) {
    if (blocks <= phys / block_bytes) continue;  // a machine with more memory than 2^26 blocks: nothing to test
    o.kv_pool_blocks = blocks;
    std::string msg;
    EXPECT_EQ(status_of([&] { Session s(stories_model(), o); }, &msg), Status::out_of_memory) << blocks;
    EXPECT_NE(msg.find(std::to_string(phys >> 20) + " MiB the device can hold"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(blocks) + " blocks"), std::string::npos) << msg;
  }
  o.kv_pool_blocks = 0;
  o.kv_pool_bytes = int64_t{16} << 40;  // 16 TiB
  if (o.kv_pool_bytes > phys) {
    EXPECT_EQ(status_of([&] { Session s(stories_model(), o); }), Status::out_of_memory);
  }
  // Sizes that fit are still accepted, the 2^26-block cap still holds.
  o.kv_pool_bytes = 0;
  o.kv_pool_blocks = 64;
  EXPECT_EQ(status_of([&] { Session s(stories_model(), o); }), Status::ok);
  o.block_size = 1;
  o.kv_pool_blocks = (int64_t{1} << 26) + 1;
  if ((o.kv_pool_blocks * block_bytes / 1024) < phys) {
    EXPECT_EQ(status_of([&] { Session s(stories_model(), o); }), Status::invalid_argument);
  }
}

TEST(SessionLimits, ForksCountTheirHostMemory) {
  // A policy, so that the sequence keeps an observation window (the bulk of a fork's host memory).
  SessionOptions o = session_opts(infokv::PolicyKind::infokv, 0.5);
  o.compression.compress_after_prefill = false;
  Session s(stories_model(), o);
  const int32_t a = s.add_sequence();
  const std::vector<int32_t> prompt = infokv_test::story_prompt(s.model());
  std::vector<infokv::BatchToken> batch;
  for (int32_t t : prompt) batch.push_back({a, t, false});
  s.decode(batch);
  const int64_t one = s.kv_stats().host_bytes;
  const infokv::SeqCache &c = s.kv().seq(a);
  int64_t window = 0;
  for (const auto &w : c.window_q) window += static_cast<int64_t>(w.size() * sizeof(float));
  const int64_t logits = static_cast<int64_t>(s.logits(a).size() * sizeof(float));
  ASSERT_GT(window, 0);
  const int32_t b = s.fork_sequence(a);
  const int64_t two = s.kv_stats().host_bytes;
  // A fork copies the logits (and tables), not the blocks, and shares the window until one of the two changes it:
  // the logits show, the window does not (yet); what the session may commit counts the window as if copied.
  EXPECT_GE(two - one, logits);
  EXPECT_LT(two - one, logits + window / 2);
  EXPECT_GE(s.committed_host_bytes() - two, window - 64);
  EXPECT_EQ(&s.kv().seq(a).window_q[0].get(), &s.kv().seq(b).window_q[0].get());
  EXPECT_EQ(s.kv().seq(b).window_q[0].owners(), 2);
  EXPECT_EQ(s.kv_stats().blocks_used, s.kv().stats().blocks_used);
  // the fork's next decode gives it its own window; the source's stays as it was
  const std::vector<float> before = s.kv().seq(a).window_q[0].get();
  s.decode({{b, prompt[1], false}});
  EXPECT_NE(&s.kv().seq(a).window_q[0].get(), &s.kv().seq(b).window_q[0].get());
  EXPECT_EQ(s.kv().seq(a).window_q[0].get(), before);
  EXPECT_EQ(s.kv().seq(a).window_q[0].owners(), 1);
  EXPECT_GE(s.kv_stats().host_bytes - two, window - 64);
  EXPECT_EQ(s.committed_host_bytes(), s.kv_stats().host_bytes);
  s.remove_sequence(b);
  EXPECT_EQ(s.kv_stats().host_bytes, one);
  // The pool's bookkeeping counts too: 8 bytes a block before any sequence.
  Session empty(stories_model(), o);
  EXPECT_GE(empty.kv_stats().host_bytes, 8 * o.kv_pool_blocks);
}

// Issue 38, weakness 1: forks are refused with out_of_memory before, not after, they could take the session's host
// memory past the limit (the machine's physical memory by default), counting shared windows as if copied.
TEST(SessionLimits, ForksPastTheHostMemoryLimitAreRefusedBeforehand) {
  SessionOptions o = session_opts(infokv::PolicyKind::infokv, 0.5);
  o.compression.compress_after_prefill = false;
  Session probe(stories_model(), o);
  const int32_t p = probe.add_sequence();
  const std::vector<int32_t> prompt = infokv_test::story_prompt(probe.model());
  std::vector<infokv::BatchToken> batch;
  for (int32_t t : prompt) batch.push_back({p, t, false});
  probe.decode(batch);
  const int64_t base = probe.committed_host_bytes();
  const int64_t per_fork = probe.kv().seq_host_bytes_unshared(p) + static_cast<int64_t>(probe.logits(p).size() * 4);
  // room for the source and three forks at their worst case, not a fourth
  const infokv::KvStats ks = probe.kv().stats();
  const int64_t pool = ks.blocks_total * ks.block_bytes;  // on the CPU the pool counts as host memory too
  o.host_memory_limit = pool + base + 3 * per_fork + per_fork / 2;
  Session s(stories_model(), o);
  const int32_t a = s.add_sequence();
  for (auto &bt : batch) bt.seq = a;
  s.decode(batch);
  std::vector<int32_t> forks;
  for (int i = 0; i < 3; ++i) forks.push_back(s.fork_sequence(a));
  const int64_t seqs = s.sequence_count(), host = s.kv_stats().host_bytes;
  std::string msg;
  EXPECT_EQ(status_of([&] { s.fork_sequence(a); }, &msg), Status::out_of_memory);
  EXPECT_NE(msg.find("limit is"), std::string::npos) << msg;
  EXPECT_EQ(s.sequence_count(), seqs);
  EXPECT_EQ(s.kv_stats().host_bytes, host);
  // removing one makes room for one again
  s.remove_sequence(forks.back());
  forks.back() = s.fork_sequence(a);
  // a fork that diverges (decodes) copies its window: memory already counted as committed when it was admitted
  const int64_t committed = s.committed_host_bytes(), held = s.kv_stats().host_bytes;
  ASSERT_GT(committed, held);
  s.decode({{forks[0], prompt[2], false}});
  EXPECT_GT(s.kv_stats().host_bytes - held, (committed - held) / 4);
  // the default limit is the machine's physical memory: a few forks are far from it
  SessionOptions d = session_opts(infokv::PolicyKind::infokv, 0.5);
  Session t(stories_model(), d);
  const int32_t x = t.add_sequence();
  t.decode({{x, 1, false}, {x, 5, false}});
  EXPECT_EQ(status_of([&] { t.fork_sequence(x); }), Status::ok);
  EXPECT_LT(t.committed_host_bytes(), infokv::physical_memory_bytes());
}

TEST(SessionLimits, MaxSequencesBoundsAddForkAndRestore) {
  SessionOptions o = session_opts();
  o.max_sequences = 3;
  Session src(stories_model(), o);
  const int32_t a = src.add_sequence();
  src.decode({{a, 1, false}, {a, 5, false}});
  infokv::snapshot::VectorSink sink;
  infokv::snapshot::save(src, a, nullptr, sink);

  Session s(stories_model(), o);
  const int32_t x = s.add_sequence();
  s.decode({{x, 1, false}, {x, 7, false}});
  s.fork_sequence(x);
  s.add_sequence();
  ASSERT_EQ(s.sequence_count(), 3);
  const infokv::KvStats before = s.kv_stats();
  std::string msg;
  EXPECT_EQ(status_of([&] { s.add_sequence(); }, &msg), Status::out_of_range);
  EXPECT_NE(msg.find("max_sequences (3)"), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { s.fork_sequence(x); }), Status::out_of_range);
  EXPECT_EQ(status_of([&] {
              infokv::snapshot::MemorySource in(sink.bytes().data(), sink.bytes().size());
              infokv::snapshot::restore(s, nullptr, in);
            }),
            Status::out_of_range);
  EXPECT_EQ(s.sequence_count(), 3);
  EXPECT_EQ(s.kv_stats().blocks_used, before.blocks_used);
  EXPECT_EQ(s.kv_stats().host_bytes, before.host_bytes);
  s.kv().check_invariants();
  // Room again after a removal.
  s.remove_sequence(x);
  infokv::snapshot::MemorySource in(sink.bytes().data(), sink.bytes().size());
  EXPECT_EQ(infokv::snapshot::restore(s, nullptr, in).size(), 1u);
  EXPECT_EQ(s.sequence_count(), 3);

  o.max_sequences = 0;
  EXPECT_EQ(status_of([&] { Session t(stories_model(), o); }), Status::invalid_argument);
  o.max_sequences = (1 << 20) + 1;
  EXPECT_EQ(status_of([&] { Session t(stories_model(), o); }), Status::invalid_argument);
  EXPECT_EQ(SessionOptions{}.max_sequences, 4096);
}

}  // namespace
