// The backend seam without a GPU: a session whose KV pool is the generic device store (make_ops_kv_store: the
// store the CUDA backend uses, here in host memory through the CPU's DeviceOps) must behave exactly like one on the
// memory-mapped host store, through every compression policy (slot moves), forks (copy-on-write block copies) and
// snapshots (whole-block reads and writes) in both directions. That CPU DeviceOps also delivers downloads only at
// sync(), as a GPU stream does, so a read of the slot channels, logits or blocks before the sync fails here too.
#include <gtest/gtest.h>

#include <random>

#include "compress/policy_table.hpp"
#include "backend/device_forward.hpp"
#include "backend/device_ops.hpp"
#include "kernels/thread_pool.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "snapshot/snapshot.hpp"
#include "support/paths.hpp"
#include "util/byte_io.hpp"
#include "util/error.hpp"
#include "support/stories_model.hpp"

using namespace infokv;

namespace {

constexpr auto stories = infokv_test::stories_model;

SessionOptions opts_for(PolicyKind p) {
  SessionOptions o;
  o.n_threads = 2;
  o.kv_dtype = KvDtype::f16;
  o.block_size = 8;
  o.ubatch = 64;  // several chunks per prompt
  o.compression.policy = p;
  o.compression.budget_fraction = 0.3;
  o.compression.interval = 12;
  return o;
}

struct Pair {
  ThreadPool pool{2};
  Session host, dev;
  explicit Pair(const SessionOptions &o)
      : host(stories(), o), dev(stories(), o, make_ops_forward(*stories(), make_host_ops(&pool, /*like_device=*/true))) {}
};

void decode_same(Pair &p, int32_t seq, const std::vector<int32_t> &toks) {
  std::vector<BatchToken> b;
  for (int32_t t : toks) b.push_back({seq, t, false});
  p.host.decode(b);
  p.dev.decode(b);
}

void expect_same(Pair &p, int32_t seq, const std::string &what) {
  ASSERT_EQ(p.host.logits(seq), p.dev.logits(seq)) << what;
  const SeqCache &a = p.host.kv().seq(seq), &b = p.dev.kv().seq(seq);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].pos, b.layers[l].pos) << what << " layer " << l;
    for (int ch = 0; ch < kSlotChannels; ++ch) EXPECT_EQ(a.layers[l].channels[static_cast<size_t>(ch)], b.layers[l].channels[static_cast<size_t>(ch)]) << what;
  }
  EXPECT_EQ(a.window_q, b.window_q) << what;
  p.host.kv().check_invariants();
  p.dev.kv().check_invariants();
}

std::vector<int32_t> random_tokens(std::mt19937 &rng, size_t n, bool bos) {
  std::vector<int32_t> t;
  if (bos) t.push_back(1);
  while (t.size() < n) t.push_back(3 + static_cast<int32_t>(rng() % 500));
  return t;
}

std::vector<uint8_t> save_bytes(const Session &s, int32_t seq) {
  snapshot::VectorSink sink;
  snapshot::save(s, seq, nullptr, sink);
  return sink.bytes();
}

}  // namespace

class DeviceStore : public ::testing::TestWithParam<PolicyKind> {};

TEST_P(DeviceStore, SessionsOnBothStoresAgreeThroughCompressionForkAndSnapshots) {
  std::mt19937 rng(1234u + static_cast<unsigned>(GetParam()));
  Pair p(opts_for(GetParam()));
  const int32_t s = p.host.add_sequence();
  ASSERT_EQ(p.dev.add_sequence(), s);
  decode_same(p, s, random_tokens(rng, 150, true));  // prefill, then compression
  expect_same(p, s, "after prefill");
  for (int i = 0; i < 30; ++i) {  // decode steps with periodic compression
    decode_same(p, s, {3 + static_cast<int32_t>(rng() % 500)});
  }
  expect_same(p, s, "after decoding");
  if (GetParam() != PolicyKind::none) {
    EXPECT_GT(p.dev.compressor().compressions(s), 1);
  }

  // A fork shares blocks; decoding both sides copies the shared last block (copy-on-write) and compacts shared ones.
  const int32_t f = p.host.fork_sequence(s);
  ASSERT_EQ(p.dev.fork_sequence(s), f);
  for (int i = 0; i < 20; ++i) {
    const int32_t a = 3 + static_cast<int32_t>(rng() % 500), b = 3 + static_cast<int32_t>(rng() % 500);
    for (Session *x : {&p.host, &p.dev}) x->decode({{s, a, false}, {f, b, false}});
  }
  expect_same(p, s, "original after fork");
  expect_same(p, f, "fork");
  EXPECT_EQ(p.host.kv().stats().blocks_used, p.dev.kv().stats().blocks_used);

  // Snapshots read blocks from either store and write them into the other: the bytes and what follows agree.
  const std::vector<uint8_t> from_host = save_bytes(p.host, f), from_dev = save_bytes(p.dev, f);
  EXPECT_EQ(from_host.size(), from_dev.size());
  Pair q(opts_for(GetParam()));
  snapshot::MemorySource src_h(from_host.data(), from_host.size()), src_d(from_dev.data(), from_dev.size());
  const int32_t rd = snapshot::restore(q.dev, nullptr, src_h).at(0);   // host store -> device store
  const int32_t rh = snapshot::restore(q.host, nullptr, src_d).at(0);  // device store -> host store
  ASSERT_EQ(rd, rh);
  for (int i = 0; i < 15; ++i) decode_same(q, rd, {3 + static_cast<int32_t>(rng() % 500)});
  for (int i = 0; i < 15; ++i) p.host.decode({{f, q.host.tokens(rd)[q.host.tokens(rd).size() - 15 + static_cast<size_t>(i)], false}});
  expect_same(q, rd, "restored");
  EXPECT_EQ(q.host.logits(rd), p.host.logits(f)) << "the restored sequence continues as the original";
}

INSTANTIATE_TEST_SUITE_P(Policies, DeviceStore,
                         ::testing::Values(PolicyKind::none, PolicyKind::infokv, PolicyKind::snapkv, PolicyKind::h2o,
                                           PolicyKind::streaming, PolicyKind::tova, PolicyKind::pyramidkv),
                         [](const ::testing::TestParamInfo<PolicyKind> &i) { return std::string(policy_name(i.param)); });

namespace {

// A backend that fails a chosen forward chunk after the real one has run (the worst case: its side effects are
// already in the cache), as a device error in the middle of a multi-chunk step would.
class FailingForward final : public DeviceForward {
 public:
  explicit FailingForward(std::unique_ptr<DeviceForward> inner) : inner_(std::move(inner)) {}
  int fail_at = -1;  // index of the chunk call that fails; -1: none
  int calls = 0;
  std::string describe() const override { return inner_->describe(); }
  int64_t free_memory() const override { return inner_->free_memory(); }
  double default_pool_fraction() const override { return inner_->default_pool_fraction(); }
  std::unique_ptr<KvStore> make_kv_store(const PagedKv &g, int64_t n) override { return inner_->make_kv_store(g, n); }
  void window_probs(float *out, const float *q, const int32_t *vis, int32_t rows, const PagedKv &kv, int32_t n_heads,
                    float scale) override {
    inner_->window_probs(out, q, vis, rows, kv, n_heads, scale);
  }
  void forward_chunk(const ForwardChunk &c, KvCache &kv, float *out) override {
    inner_->forward_chunk(c, kv, out);
    if (calls++ == fail_at) throw Error(Status::internal, "injected device failure");
  }

 private:
  std::unique_ptr<DeviceForward> inner_;
};

}  // namespace

class FailedStep : public ::testing::TestWithParam<PolicyKind> {};

// A step that fails in its second chunk leaves every sequence exactly as before (slots, lengths, slot
// channels, window queries, logits), and the same step retried then equals a session that never failed.
TEST_P(FailedStep, DeviceFailureMidStepChangesNothing) {
  SessionOptions o = opts_for(GetParam());
  o.ubatch = 16;
  o.compression.budget_fraction = 1.0;  // score every step, evict nothing
  o.compression.interval = 1 << 20;
  ThreadPool pool(2);
  auto failing = std::make_unique<FailingForward>(make_ops_forward(*stories(), make_host_ops(&pool)));
  FailingForward *f = failing.get();
  Session s(stories(), o, std::move(failing)), ref(stories(), o);
  const int32_t id = s.add_sequence();
  ASSERT_EQ(ref.add_sequence(), id);
  std::mt19937 rng(99);
  std::vector<BatchToken> first, second;
  for (int32_t t : random_tokens(rng, 40, true)) first.push_back({id, t, false});
  for (int32_t t : random_tokens(rng, 40, false)) second.push_back({id, t, false});
  s.decode(first);
  ref.decode(first);
  const SeqCache before = s.kv().seq(id);
  const std::vector<float> logits_before = s.logits(id);
  const KvStats stats_before = s.kv().stats();
  f->fail_at = f->calls + 1;  // the second of the step's three chunks
  try {
    s.decode(second);
    ADD_FAILURE() << "the injected failure should surface";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::internal);
  }
  const SeqCache &after = s.kv().seq(id);
  EXPECT_EQ(after.length, before.length);
  for (size_t l = 0; l < before.layers.size(); ++l) {
    EXPECT_EQ(after.layers[l].pos, before.layers[l].pos) << "layer " << l;
    EXPECT_EQ(after.layers[l].blocks, before.layers[l].blocks) << "layer " << l;
    for (int ch = 0; ch < kSlotChannels; ++ch)
      EXPECT_EQ(after.layers[l].channels[static_cast<size_t>(ch)], before.layers[l].channels[static_cast<size_t>(ch)]) << "layer " << l << " channel " << ch;
  }
  EXPECT_EQ(after.window_q, before.window_q);
  EXPECT_EQ(after.window_pos, before.window_pos);
  EXPECT_EQ(s.logits(id), logits_before);
  EXPECT_EQ(s.kv().stats().blocks_used, stats_before.blocks_used);
  s.kv().check_invariants();

  f->fail_at = -1;
  s.decode(second);
  ref.decode(second);
  EXPECT_EQ(s.logits(id), ref.logits(id));
  for (size_t l = 0; l < before.layers.size(); ++l)
    for (int ch = 0; ch < kSlotChannels; ++ch)
      EXPECT_EQ(s.kv().seq(id).layers[l].channels[static_cast<size_t>(ch)], ref.kv().seq(id).layers[l].channels[static_cast<size_t>(ch)]);
  EXPECT_EQ(s.kv().seq(id).window_q, ref.kv().seq(id).window_q);
}

INSTANTIATE_TEST_SUITE_P(Policies, FailedStep, ::testing::Values(PolicyKind::h2o, PolicyKind::snapkv, PolicyKind::infokv),
                         [](const ::testing::TestParamInfo<PolicyKind> &i) { return std::string(policy_name(i.param)); });
