// Snapshots: exact continuation, dtype and block-size conversion, chunking, size, and refusal of damaged, foreign
// and future snapshots with the right status and no state change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "compress/policy_table.hpp"
#include "infokv_fb/snapshot_generated.h"
#include "snapshot/snapshot.hpp"
#include "support/snapshot.hpp"
#include "util/error.hpp"

using namespace infokv;
using namespace infokv_test;

namespace {

std::vector<uint8_t> save_bytes(const Session &s, int32_t seq, const Sampler *sp, const snapshot::SaveOptions &o = {}) {
  snapshot::VectorSink sink;
  snapshot::save(s, seq, sp, sink, o);
  return sink.bytes();
}

std::vector<int32_t> restore_bytes(Session &s, Sampler *sp, const std::vector<uint8_t> &b) {
  snapshot::MemorySource src(b.data(), b.size());
  return snapshot::restore(s, sp, src);
}

snapshot::Summary inspect_bytes(const std::vector<uint8_t> &b) {
  snapshot::MemorySource src(b.data(), b.size());
  return snapshot::inspect(src);
}

Status restore_status(Session &s, Sampler *sp, const std::vector<uint8_t> &b) {
  try {
    restore_bytes(s, sp, b);
  } catch (const Error &e) {
    return e.status();
  }
  return Status::ok;
}

// Everything a failed restore must leave untouched.
struct Observed {
  KvStats stats;
  std::vector<int32_t> ids;
  std::vector<float> logits0;
  std::vector<uint64_t> rng;
  bool operator==(const Observed &o) const {
    return stats.blocks_used == o.stats.blocks_used && stats.blocks_free == o.stats.blocks_free && ids == o.ids &&
           logits0 == o.logits0 && rng == o.rng;
  }
};
Observed observe(Session &s, Sampler &sp) {
  Observed o;
  o.stats = s.kv().stats();
  o.ids = s.kv().sequence_ids();
  o.logits0 = s.logits(o.ids.front());
  o.rng.assign(sp.rng().state(), sp.rng().state() + 4);
  return o;
}

struct Case {
  PolicyKind policy;
  double budget;
  int32_t interval;
  float temperature;
};

class SnapshotContinuation : public ::testing::TestWithParam<Case> {};

TEST_P(SnapshotContinuation, RestoredSessionContinuesWithIdenticalTokensAndLogits) {
  const Case c = GetParam();
  auto m = stories_model();
  SamplerParams sp;
  sp.temperature = c.temperature;
  sp.seed = 1234;
  sp.repeat_penalty = 1.1f;
  Session a(m, session_opts(c.policy, c.budget, c.interval));
  const int32_t seq = a.add_sequence();
  a.compressor().protect(seq, ProtectedSpan{0, 3, false});
  Sampler sa(sp);
  prefill(a, seq, &sa, story_prompt(*m));
  continue_n(a, seq, sa, 12);
  const std::vector<uint8_t> snap = save_bytes(a, seq, &sa);
  const Trace want = continue_n(a, seq, sa, 20);

  Session b(m, session_opts(c.policy, c.budget, c.interval));
  Sampler sb(SamplerParams{});  // replaced by the snapshot's sampler
  const std::vector<int32_t> ids = restore_bytes(b, &sb, snap);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(b.compressor().spans(ids[0]).size(), 1u);
  b.kv().check_invariants();
  const Trace got = continue_n(b, ids[0], sb, 20);
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t i = 0; i < got.logits.size(); ++i)
    ASSERT_EQ(0, std::memcmp(got.logits[i].data(), want.logits[i].data(), got.logits[i].size() * sizeof(float))) << "step " << i;
  EXPECT_EQ(b.compressor().compressions(ids[0]), a.compressor().compressions(seq));
  EXPECT_EQ(b.info(ids[0]).kept_per_layer, a.info(seq).kept_per_layer);
}

INSTANTIATE_TEST_SUITE_P(PoliciesAndSampling, SnapshotContinuation,
                         ::testing::Values(Case{PolicyKind::none, 0, 1024, 0.0f}, Case{PolicyKind::none, 0, 1024, 0.9f},
                                           Case{PolicyKind::infokv, 0.5, 6, 0.0f}, Case{PolicyKind::infokv, 0.5, 6, 0.9f},
                                           Case{PolicyKind::h2o, 0.4, 5, 0.9f}, Case{PolicyKind::snapkv, 0.3, 7, 0.0f},
                                           // compression every step or two: window rows trimmed to what the next uses
                                           Case{PolicyKind::infokv, 0.25, 1, 0.9f}, Case{PolicyKind::tova, 0.3, 3, 0.0f},
                                           Case{PolicyKind::pyramidkv, 0.4, 2, 0.9f},
                                           // the default trigger (memory: budget + slack), window rows saved for it
                                           Case{PolicyKind::snapkv, 0.3, 1024, 0.0f}, Case{PolicyKind::auto_, 0.25, 1024, 0.9f},
                                           Case{PolicyKind::tova, 0.2, 0, 0.0f}));

// Under a quality target alone (auto, max_loss, no budget) the next compression reads the window a quality target
// keeps (32 rows): the snapshot keeps those rows, so the restored sequence compresses as the uninterrupted one. (A
// save derived the budget itself and, finding none, kept no rows.)
TEST(Snapshot, AQualityTargetSequenceContinuesExactly) {
  auto m = stories_model();
  SessionOptions o = session_opts(PolicyKind::auto_, 0.0);
  o.compression.max_loss = 0.02;
  o.compression.question = Question::next;  // the window's rows are the evidence (a probe's are made anew)
  SamplerParams sp;
  sp.temperature = 0.9f;
  sp.seed = 99;
  Session a(m, o);
  const int32_t seq = a.add_sequence();
  Sampler sa(sp);
  prefill(a, seq, &sa, story_prompt(*m));
  continue_n(a, seq, sa, 60);
  ASSERT_GT(a.compressor().compressions(seq), 0);
  const std::vector<uint8_t> snap = save_bytes(a, seq, &sa);
  const Trace want = continue_n(a, seq, sa, 80);
  ASSERT_GT(a.compressor().compressions(seq), 2);

  Session b(m, o);
  Sampler sb(SamplerParams{});
  const int32_t id = restore_bytes(b, &sb, snap).at(0);
  const Trace got = continue_n(b, id, sb, 80);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logits, want.logits);
  EXPECT_EQ(b.compressor().compressions(id), a.compressor().compressions(seq));
  EXPECT_EQ(b.info(id).kept_per_layer, a.info(seq).kept_per_layer);
}

// With compression every step, the observation-window queries used to dominate a compressed snapshot (stored as
// f32, all 32 rows: 48% of the full cache's snapshot at 25%); now they are stored in the KV dtype and only the rows
// the next compression uses.
TEST(Snapshot, FrequentCompressionKeepsTheSnapshotSmall) {
  auto m = stories_model();
  const std::vector<int32_t> prompt = m->tokenizer().encode("Once upon a time", true);
  auto run = [&](PolicyKind p, double budget, int32_t interval) {
    Session s(m, session_opts(p, budget, interval));
    const int32_t seq = s.add_sequence();
    Sampler sp(SamplerParams{});
    prefill(s, seq, &sp, prompt);
    continue_n(s, seq, sp, 300);
    return save_bytes(s, seq, &sp).size();
  };
  const size_t full = run(PolicyKind::none, 0.0, 1024), every = run(PolicyKind::infokv, 0.25, 1);
  EXPECT_LE(static_cast<double>(every), 0.36 * static_cast<double>(full)) << every << " vs " << full;
}

TEST(Snapshot, DifferentBlockSizeAndManySmallChunksRestoreExactly) {
  auto m = stories_model();
  Session a(m, session_opts(PolicyKind::infokv, 0.5, 5));
  const int32_t seq = a.add_sequence();
  Sampler sa(SamplerParams{});
  prefill(a, seq, &sa, story_prompt(*m));
  continue_n(a, seq, sa, 6);
  snapshot::SaveOptions o;
  o.max_chunk_bytes = 700;  // a few slots per chunk: every layer split
  const std::vector<uint8_t> snap = save_bytes(a, seq, &sa, o);
  const snapshot::Summary sum = inspect_bytes(snap);
  EXPECT_GT(sum.sequences[0].layer_chunks, sum.n_layer);
  const Trace want = continue_n(a, seq, sa, 10);

  Session b(m, session_opts(PolicyKind::infokv, 0.5, 5, KvDtype::f16, 5));
  Sampler sb(SamplerParams{});
  const int32_t id = restore_bytes(b, &sb, snap).at(0);
  b.kv().check_invariants();
  const Trace got = continue_n(b, id, sb, 10);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logits, want.logits);
}

TEST(Snapshot, F16SnapshotRestoresIntoF32AndBf16Sessions) {
  auto m = stories_model();
  Session a(m, session_opts());
  const int32_t seq = a.add_sequence();
  prefill(a, seq, nullptr, story_prompt(*m));
  const std::vector<uint8_t> snap = save_bytes(a, seq, nullptr);
  a.decode({{seq, 300, false}});
  const std::vector<float> want = a.logits(seq);
  for (KvDtype dt : {KvDtype::f32, KvDtype::bf16}) {
    Session b(m, session_opts(PolicyKind::none, 0, 1024, dt));
    const int32_t id = restore_bytes(b, nullptr, snap).at(0);
    b.decode({{id, 300, false}});
    const std::vector<float> &got = b.logits(id);
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
    EXPECT_LT(max_diff, dt == KvDtype::f32 ? 0.02 : 0.25) << kv_dtype_name(dt);
  }
}

// A sequence saved without a policy has no observation-window queries; restored under a window policy it compresses
// with none (the scorer sees zero rows: no zero-byte copies from null buffers, which the sanitizer build aborts on),
// and goes on decoding and compressing as its new rows arrive.
TEST(Snapshot, ASequenceSavedWithoutAPolicyCompressesUnderAWindowPolicy) {
  auto m = stories_model();
  Session a(m, session_opts());
  const int32_t seq = a.add_sequence();
  prefill(a, seq, nullptr, story_prompt(*m));
  const std::vector<uint8_t> snap = save_bytes(a, seq, nullptr);
  for (PolicyKind p : {PolicyKind::snapkv, PolicyKind::infokv, PolicyKind::tova, PolicyKind::pyramidkv, PolicyKind::auto_}) {
    Session b(m, session_opts(p, 0.5));
    const std::vector<int32_t> ids = restore_bytes(b, nullptr, snap);
    ASSERT_EQ(ids.size(), 1u);
    ASSERT_NO_THROW(b.compressor().compress(ids[0])) << policy_name(p);
    EXPECT_LT(b.info(ids[0]).kept_per_layer[0], b.info(ids[0]).length) << policy_name(p);
    SamplerParams sp;
    sp.temperature = 0;
    Sampler greedy(sp);
    continue_n(b, ids[0], greedy, 40);
    b.kv().check_invariants();
  }
}

TEST(Snapshot, WholeSessionSavesEverySequence) {
  auto m = stories_model();
  Session a(m, session_opts());
  const int32_t s0 = a.add_sequence();
  prefill(a, s0, nullptr, story_prompt(*m));
  const int32_t s1 = a.fork_sequence(s0);
  a.decode({{s1, 42, false}});
  const std::vector<uint8_t> snap = save_bytes(a, -1, nullptr);
  Session b(m, session_opts());
  const std::vector<int32_t> ids = restore_bytes(b, nullptr, snap);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(b.tokens(ids[0]), a.tokens(s0));
  EXPECT_EQ(b.tokens(ids[1]), a.tokens(s1));
  EXPECT_EQ(b.logits(ids[1]), a.logits(s1));
}

// A caller that can take fewer sequences than the file holds (a C caller's id buffer) gets buffer_too_small from
// the header: nothing restored, the sampler as it was, the file's count reported.
TEST(Snapshot, MoreSequencesThanTheCallerTakesRestoresNothing) {
  auto m = stories_model();
  Session a(m, session_opts());
  const int32_t s0 = a.add_sequence();
  prefill(a, s0, nullptr, story_prompt(*m));
  a.fork_sequence(s0);
  SamplerParams sp;
  sp.seed = 7;
  Sampler saved(sp);
  const std::vector<uint8_t> snap = save_bytes(a, -1, &saved);
  Session b(m, session_opts());
  Sampler mine(SamplerParams{});
  const uint64_t rng_before = mine.rng().state()[0];
  snapshot::MemorySource src(snap.data(), snap.size());
  int64_t announced = -1;
  try {
    snapshot::restore(b, &mine, src, 1, &announced);
    FAIL() << "restored two sequences into a caller that takes one";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::buffer_too_small);
  }
  EXPECT_EQ(announced, 2);
  EXPECT_EQ(b.sequence_count(), 0);
  EXPECT_EQ(mine.params().seed, SamplerParams{}.seed);
  EXPECT_EQ(mine.rng().state()[0], rng_before);
  snapshot::MemorySource again(snap.data(), snap.size());
  EXPECT_EQ(snapshot::restore(b, &mine, again, 2).size(), 2u);
}

TEST(Snapshot, EmptyAndTruncatedSequencesRoundTrip) {
  auto m = stories_model();
  Session a(m, session_opts());
  const int32_t empty = a.add_sequence();
  const int32_t cut = a.add_sequence();
  prefill(a, cut, nullptr, story_prompt(*m));
  a.truncate(cut, 5);  // no logits after a truncate
  Session b(m, session_opts());
  const std::vector<int32_t> ids = restore_bytes(b, nullptr, save_bytes(a, -1, nullptr));
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(b.info(ids[0]).length, 0);
  EXPECT_EQ(b.info(ids[1]).length, 5);
  EXPECT_EQ(b.tokens(ids[1]), a.tokens(cut));
  EXPECT_THROW(b.logits(ids[1]), Error);
  b.decode({{ids[0], 1, false}});
  a.decode({{empty, 1, false}});
  EXPECT_EQ(b.logits(ids[0]), a.logits(empty));
  b.kv().check_invariants();
}

TEST(Snapshot, CompressedToAQuarterIsAtMostThirtyPercentOfUncompressed) {
  auto m = stories_model();
  std::string text;
  // Long enough that the fixed part (observation-window queries: 32 rows x n_heads x head_dim floats per layer,
  // and the logits) is small next to the kept K/V.
  for (int i = 0; i < 62; ++i) text += "Once upon a time, there was a little girl named Lily. She loved to play in the park. ";
  std::vector<int32_t> p = m->tokenizer().encode(text, true);
  p.resize(std::min<size_t>(p.size(), 2400));
  Session full(m, session_opts());
  Session comp(m, session_opts(PolicyKind::snapkv, 0.25));
  const int32_t a = full.add_sequence(), b = comp.add_sequence();
  prefill(full, a, nullptr, p);
  prefill(comp, b, nullptr, p);
  const size_t n_full = save_bytes(full, a, nullptr).size(), n_comp = save_bytes(comp, b, nullptr).size();
  EXPECT_LE(static_cast<double>(n_comp), 0.30 * static_cast<double>(n_full)) << n_comp << " vs " << n_full;
}

// A small compressed snapshot and a session with state of its own for the refusal tests.
struct Damage : ::testing::Test {
  void SetUp() override {
    auto m = stories_model();
    Session a(m, session_opts(PolicyKind::infokv, 0.5));
    const int32_t seq = a.add_sequence();
    Sampler sa(SamplerParams{});
    prefill(a, seq, &sa, m->tokenizer().encode("Once upon a time", true));
    snap = save_bytes(a, seq, &sa);
    target = std::make_unique<Session>(m, session_opts(PolicyKind::infokv, 0.5));
    const int32_t t = target->add_sequence();
    prefill(*target, t, nullptr, m->tokenizer().encode("Lily had a dog", true));
    sampler = std::make_unique<Sampler>(SamplerParams{});
    before = observe(*target, *sampler);
  }
  void expect_untouched() {
    EXPECT_TRUE(observe(*target, *sampler) == before);
    target->kv().check_invariants();
  }
  std::vector<uint8_t> snap;
  std::unique_ptr<Session> target;
  std::unique_ptr<Sampler> sampler;
  Observed before;
};

TEST_F(Damage, IntactSnapshotRestores) { EXPECT_EQ(restore_status(*target, sampler.get(), snap), Status::ok); }

TEST_F(Damage, EveryFlippedByteIsRefusedAsBadSnapshot) {
  for (size_t i = 0; i < snap.size(); ++i) {
    std::vector<uint8_t> bad = snap;
    bad[i] ^= static_cast<uint8_t>(1u << (i % 8));
    ASSERT_EQ(restore_status(*target, sampler.get(), bad), Status::bad_snapshot) << "byte " << i;
  }
  expect_untouched();
}

TEST_F(Damage, EveryTruncationIsRefusedAsBadSnapshot) {
  for (size_t n = 0; n < snap.size(); ++n) {
    std::vector<uint8_t> bad(snap.begin(), snap.begin() + static_cast<long>(n));
    ASSERT_EQ(restore_status(*target, sampler.get(), bad), Status::bad_snapshot) << "length " << n;
  }
  std::vector<uint8_t> longer = snap;
  longer.push_back(0);
  EXPECT_EQ(restore_status(*target, sampler.get(), longer), Status::bad_snapshot);
  expect_untouched();
}

TEST_F(Damage, RandomMutationsNeverCrashAndNeverChangeState) {
  std::mt19937_64 rng(7);
  for (int it = 0; it < 3000; ++it) {
    std::vector<uint8_t> bad = snap;
    const int kind = static_cast<int>(rng() % 4);
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) {
      const size_t at = rng() % bad.size();
      if (kind == 0) bad[at] = static_cast<uint8_t>(rng());
      else if (kind == 1) bad.erase(bad.begin() + static_cast<long>(at));
      else if (kind == 2) bad.insert(bad.begin() + static_cast<long>(at), static_cast<uint8_t>(rng()));
      else bad[at] ^= 0x80;
      if (bad.empty()) break;
    }
    if (bad == snap) continue;  // a mutation that undid itself
    const Status st = restore_status(*target, sampler.get(), bad);
    ASSERT_NE(st, Status::ok) << "iteration " << it;
    ASSERT_NE(st, Status::internal) << "iteration " << it;
  }
  expect_untouched();
}

// Edits the header chunk (a FlatBuffers in-place mutation) and re-seals the container, so only the edit differs.
template <typename F>
std::vector<uint8_t> with_header(const std::vector<uint8_t> &snap, F edit) {
  auto chunks = split_chunks(snap);
  auto *c = snap::GetMutableChunk(chunks[0].data());
  edit(c->mutable_header());
  return join_chunks(chunks);
}

TEST_F(Damage, ResealedUneditedSnapshotRestores) {
  EXPECT_EQ(restore_status(*target, sampler.get(), join_chunks(split_chunks(snap))), Status::ok);
}

TEST_F(Damage, AnotherModelsFingerprintIsRefusedAsWrongModel) {
  auto w = with_header(snap, [](snap::Header *h) { ASSERT_TRUE(h->mutate_weights_fingerprint(h->weights_fingerprint() ^ 1)); });
  EXPECT_EQ(restore_status(*target, sampler.get(), w), Status::wrong_model);
  auto t = with_header(snap, [](snap::Header *h) { ASSERT_TRUE(h->mutate_tokenizer_fingerprint(h->tokenizer_fingerprint() + 1)); });
  EXPECT_EQ(restore_status(*target, sampler.get(), t), Status::wrong_model);
  auto l = with_header(snap, [](snap::Header *h) { ASSERT_TRUE(h->mutate_head_dim(h->head_dim() * 2)); });
  EXPECT_EQ(restore_status(*target, sampler.get(), l), Status::wrong_model);
  expect_untouched();
}

// A header that calls stories260K's cache (heads of 8) q8_0 or q4_0 is refused before any K/V is read: such rows
// would be no whole block (zero bytes each), and empty K/V vectors would pass every size check.
TEST_F(Damage, AQuantisedDtypeForHeadsThatHoldNoBlockIsRefused) {
  for (snap::KvDtype dt : {snap::KvDtype::Q8_0, snap::KvDtype::Q4_0}) {
    auto bad = with_header(snap, [&](snap::Header *h) {
      ASSERT_TRUE(h->mutate_kv_dtype(dt));
      ASSERT_TRUE(h->mutate_format_version(snapshot::kQuantKvVersion));
      ASSERT_TRUE(h->mutate_min_reader_version(snapshot::kQuantKvVersion));
    });
    EXPECT_EQ(restore_status(*target, sampler.get(), bad), Status::bad_snapshot);
    try {
      inspect_bytes(bad);
      ADD_FAILURE() << "inspect accepted it";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("whole number"), std::string::npos) << e.what();
    }
  }
  expect_untouched();
}

TEST_F(Damage, NewerFormatIsRefusedAsVersion) {
  auto v = with_header(snap, [](snap::Header *h) {
    ASSERT_TRUE(h->mutate_min_reader_version(snapshot::kReaderVersion + 1));
    ASSERT_TRUE(h->mutate_format_version(snapshot::kReaderVersion + 1));
  });
  EXPECT_EQ(restore_status(*target, sampler.get(), v), Status::version);
  // A newer writer whose files old readers may still read (min_reader_version 1) restores.
  auto ok = with_header(snap, [](snap::Header *h) { ASSERT_TRUE(h->mutate_format_version(7)); });
  EXPECT_EQ(restore_status(*target, sampler.get(), ok), Status::ok);
}

TEST_F(Damage, SemanticViolationInsideValidChunksIsRefused) {
  auto chunks = split_chunks(snap);
  // positions not ascending in the first layer chunk (index 2: header, sequence, layer 0)
  auto *layer = snap::GetMutableChunk(chunks[2].data())->mutable_layer();
  ASSERT_NE(layer, nullptr);
  auto *pos = layer->mutable_pos();
  ASSERT_GE(pos->size(), 2u);
  pos->Mutate(1, pos->Get(0));
  EXPECT_EQ(restore_status(*target, sampler.get(), join_chunks(chunks)), Status::bad_snapshot);
  expect_untouched();
}

// The FlatBuffers verifier checks a vector's length word for 4-byte alignment but not its elements, so a hostile
// (or merely unusual) writer can place the 8-byte RNG words at an address that is only 4-aligned. The reader must
// take them as they are, without a misaligned load (UBSan's alignment check catches one in the sanitizer build).
TEST_F(Damage, MisalignedRngWordsRestoreTheSameState) {
  auto chunks = split_chunks(snap);
  std::vector<uint8_t> &c = chunks[0];
  const snap::SamplerState *sst = snap::GetChunk(c.data())->header()->sampler();
  ASSERT_NE(sst, nullptr);
  ASSERT_EQ(sst->rng()->size(), 4u);
  uint64_t want[4];
  for (int i = 0; i < 4; ++i) want[i] = sst->rng()->Get(static_cast<flatbuffers::uoffset_t>(i));
  const size_t vec = static_cast<size_t>(reinterpret_cast<const uint8_t *>(sst->rng()) - c.data());
  // The table field that points at the vector: a forward offset relative to its own position.
  size_t field = 0;
  int found = 0;
  for (size_t f = 0; f + 4 <= vec; f += 4) {
    uint32_t off;
    std::memcpy(&off, c.data() + f, 4);
    if (off == vec - f) field = f, ++found;
  }
  ASSERT_EQ(found, 1);
  // Append a copy whose words start at 4 mod 8 (the chunk buffer itself is 16-aligned) and point the field at it.
  while (c.size() % 8 != 0) c.push_back(0);
  const size_t moved = c.size();
  const uint32_t len = 4, off = static_cast<uint32_t>(moved - field);
  c.insert(c.end(), reinterpret_cast<const uint8_t *>(&len), reinterpret_cast<const uint8_t *>(&len) + 4);
  // Other words than the saved ones (still a valid xoshiro state), so a restore that ignored the field would fail.
  for (int i = 0; i < 4; ++i) {
    want[i] ^= 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1);
    for (int b = 0; b < 8; ++b) c.push_back(static_cast<uint8_t>(want[i] >> (8 * b)));
  }
  std::memcpy(c.data() + field, &off, 4);
  ASSERT_EQ((moved + 4) % 8, 4u);
  ASSERT_EQ(restore_status(*target, sampler.get(), join_chunks(chunks)), Status::ok);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(sampler->rng().state()[i], want[i]) << "word " << i;
}

TEST_F(Damage, FullPoolIsRefusedAsKvFullWithNothingChanged) {
  auto m = stories_model();
  SessionOptions o = session_opts(PolicyKind::infokv, 0.5);
  o.kv_pool_blocks = 6;
  Session small(m, o);
  const int32_t s = small.add_sequence();
  prefill(small, s, nullptr, m->tokenizer().encode("Lily had a dog", true));
  const KvStats st = small.kv().stats();
  try {
    restore_bytes(small, nullptr, snap);
    FAIL() << "restored into a full pool";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::kv_full);
  }
  EXPECT_EQ(small.kv().stats().blocks_used, st.blocks_used);
  EXPECT_EQ(small.kv().sequence_ids().size(), 1u);
}

TEST(Snapshot, InspectNeedsNoModelAndReportsLayout) {
  auto m = stories_model();
  Session a(m, session_opts(PolicyKind::snapkv, 0.5));
  const int32_t seq = a.add_sequence();
  prefill(a, seq, nullptr, story_prompt(*m));
  const std::vector<uint8_t> b = save_bytes(a, seq, nullptr);
  const snapshot::Summary s = inspect_bytes(b);
  EXPECT_EQ(s.file_bytes, static_cast<int64_t>(b.size()));
  EXPECT_EQ(s.n_layer, m->hparams().n_layer);
  EXPECT_EQ(s.compression.policy, PolicyKind::snapkv);
  EXPECT_EQ(s.sequences.at(0).kept_per_layer, a.info(seq).kept_per_layer);
  EXPECT_FALSE(s.has_sampler);
  EXPECT_NE(snapshot::summary_json(s).find("\"kept_per_layer\""), std::string::npos);
}

}  // namespace

namespace {
// Edits one chunk in place (FlatBuffers mutation) and re-seals the container.
template <typename F>
std::vector<uint8_t> with_chunk(const std::vector<uint8_t> &file, size_t index, F edit) {
  auto chunks = split_chunks(file);
  edit(snap::GetMutableChunk(chunks.at(index).data()));
  return join_chunks(chunks);
}
template <typename T>
uint64_t hash_of(const flatbuffers::Vector<T> *v) { return XXH3_64bits(v->data(), v->size() * sizeof(T)); }
}  // namespace

// Counters are range-checked, not trusted: since_compress = INT64_MAX in a checksummed snapshot used to overflow on
// the next step and turn periodic compression off for good; a compression count at the top of int64 would overflow.
TEST_F(Damage, CountersOutOfRangeAreRefused) {
  auto m = stories_model();
  Session a(m, session_opts(PolicyKind::infokv, 0.5));
  const int32_t seq = a.add_sequence();
  Sampler sa(SamplerParams{});
  prefill(a, seq, &sa, m->tokenizer().encode("Once upon a time", true));
  a.decode({{seq, 300, false}});  // since_compress 1 and one compression: both stored in the chunk
  const std::vector<uint8_t> good = save_bytes(a, seq, &sa);
  ASSERT_EQ(restore_status(*target, sampler.get(), good), Status::ok);
  target->remove_sequence(target->kv().sequence_ids().back());
  for (int64_t v : {std::numeric_limits<int64_t>::max(), int64_t{-1}, a.info(seq).length + 1}) {
    auto b = with_chunk(good, 1, [&](snap::Chunk *c) { ASSERT_TRUE(c->mutable_sequence()->mutate_since_compress(v)); });
    EXPECT_EQ(restore_status(*target, sampler.get(), b), Status::bad_snapshot) << "since_compress " << v;
  }
  auto n = with_chunk(good, 1, [&](snap::Chunk *c) {
    ASSERT_TRUE(c->mutable_sequence()->mutate_n_compressions(std::numeric_limits<int64_t>::max()));
  });
  EXPECT_EQ(restore_status(*target, sampler.get(), n), Status::bad_snapshot);
  expect_untouched();
}

// Compression parameters get the config's rules: a NaN budget used to restore, and `snapshot inspect --json` printed
// it as `nan` (invalid JSON) and exited 0.
TEST_F(Damage, NonFiniteCompressionParametersAreRefused) {
  for (double v : {std::nan(""), std::numeric_limits<double>::infinity(), 2.0}) {
    auto b = with_header(snap, [&](snap::Header *h) { ASSERT_TRUE(h->mutable_compression()->mutate_budget_fraction(v)); });
    EXPECT_EQ(restore_status(*target, sampler.get(), b), Status::bad_snapshot) << v;
    try {
      inspect_bytes(b);
      ADD_FAILURE() << "inspect accepted budget_fraction " << v;
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::bad_snapshot);
    }
  }
  expect_untouched();
}

// NaN or Inf in the logits, K/V or slot channel values (checksums re-made to match) are refused: they used to restore
// and produce token 0 forever.
TEST_F(Damage, NonFiniteValuesAreRefused) {
  auto lg = with_chunk(snap, 1, [](snap::Chunk *c) {
    auto *s = c->mutable_sequence();
    ASSERT_GT(s->logits()->size(), 3u);
    s->mutable_logits()->Mutate(3, std::nanf(""));
    ASSERT_TRUE(s->mutate_logits_xxh3(hash_of(s->logits())));
  });
  EXPECT_EQ(restore_status(*target, sampler.get(), lg), Status::bad_snapshot);
  for (uint16_t bits : {uint16_t{0x7e00}, uint16_t{0x7c00}, uint16_t{0xfc00}}) {  // f16 NaN, +Inf, -Inf
    auto kv = with_chunk(snap, 2, [&](snap::Chunk *c) {
      auto *L = c->mutable_layer();
      ASSERT_GE(L->k()->size(), 4u);
      L->mutable_k()->Mutate(2, static_cast<uint8_t>(bits & 0xff));
      L->mutable_k()->Mutate(3, static_cast<uint8_t>(bits >> 8));
      ASSERT_TRUE(L->mutate_k_xxh3(hash_of(L->k())));
    });
    EXPECT_EQ(restore_status(*target, sampler.get(), kv), Status::bad_snapshot) << std::hex << bits;
  }
  auto imp = with_chunk(snap, 2, [](snap::Chunk *c) {
    auto *L = c->mutable_layer();
    if (L->imp() == nullptr || L->imp()->size() == 0) return;
    L->mutable_imp()->Mutate(0, std::numeric_limits<float>::infinity());
    ASSERT_TRUE(L->mutate_imp_xxh3(hash_of(L->imp())));
  });
  if (imp != join_chunks(split_chunks(snap))) {
    EXPECT_EQ(restore_status(*target, sampler.get(), imp), Status::bad_snapshot);
  }
  expect_untouched();
}

// Protected spans are merged and bounded: a million of them made each compression take seconds.
TEST(Snapshot, ProtectedSpansAreMergedAndBounded) {
  auto m = stories_model();
  Session a(m, session_opts(PolicyKind::infokv, 0.5));
  const int32_t seq = a.add_sequence();
  for (int64_t i = 0; i < 100000; ++i) a.compressor().protect(seq, ProtectedSpan{i % 1000, i % 1000 + 2, false});
  ASSERT_EQ(a.compressor().spans(seq).size(), 1u);
  EXPECT_EQ(a.compressor().spans(seq)[0].begin, 0);
  EXPECT_EQ(a.compressor().spans(seq)[0].end, 1001);
  a.compressor().protect(seq, ProtectedSpan{5, 5, false});  // empty: nothing to hold
  EXPECT_EQ(a.compressor().spans(seq).size(), 1u);
  for (int64_t i = 1; i < kMaxProtectedSpans; ++i) a.compressor().protect(seq, ProtectedSpan{2000 + 2 * i, 2001 + 2 * i, true});
  try {
    a.compressor().protect(seq, ProtectedSpan{1, 2, true});
    FAIL() << "span beyond the limit accepted";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::out_of_range);
  }
  EXPECT_EQ(static_cast<int32_t>(a.compressor().spans(seq).size()), kMaxProtectedSpans);
  // A session at the limit still compresses quickly, saves, and restores.
  prefill(a, seq, nullptr, story_prompt(*m));
  const std::vector<uint8_t> b = save_bytes(a, seq, nullptr);
  Session c(m, session_opts(PolicyKind::infokv, 0.5));
  const std::vector<int32_t> ids = restore_bytes(c, nullptr, b);
  EXPECT_EQ(c.compressor().spans(ids.at(0)).size(), a.compressor().spans(seq).size());
}

// ---- the auto policy's report travels with the sequence ----
namespace {

std::vector<int32_t> long_story(const Model &m) {
  std::string text;
  for (int i = 0; i < 4; ++i) text += "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. ";
  return m.tokenizer().encode(text, true);
}

void expect_same_report(const AutoReport &a, const AutoReport &b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].evidence, b.layers[l].evidence) << "layer " << l;
    EXPECT_EQ(a.layers[l].budget, b.layers[l].budget) << "layer " << l;
    EXPECT_EQ(a.layers[l].alpha, b.layers[l].alpha) << "layer " << l;
    EXPECT_EQ(a.layers[l].loss, b.layers[l].loss) << "layer " << l;
  }
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.uniform_tokens, b.uniform_tokens);
  EXPECT_EQ(a.max_loss, b.max_loss);
}

// An auto-compressed sequence and its snapshot.
struct AutoSnapshot {
  std::vector<uint8_t> bytes;
  AutoReport report;
};
AutoSnapshot auto_snapshot(double budget, double max_loss) {
  auto m = stories_model();
  SessionOptions o = session_opts(PolicyKind::auto_, budget);
  o.compression.max_loss = max_loss;
  Session a(m, o);
  const int32_t seq = a.add_sequence();
  prefill(a, seq, nullptr, long_story(*m));
  AutoSnapshot s;
  s.report = a.compressor().state(seq).auto_report;
  s.bytes = save_bytes(a, seq, nullptr);
  return s;
}

}  // namespace

TEST(SnapshotAuto, RestoreAndInspectKeepTheReport) {
  auto m = stories_model();
  const AutoSnapshot snap = auto_snapshot(0.5, 0.0);
  ASSERT_EQ(static_cast<int32_t>(snap.report.layers.size()), m->hparams().n_layer) << "auto did not compress";
  // Restored into a session of another policy: the report describes the sequence's cache, so it comes along.
  Session b(m, session_opts(PolicyKind::snapkv, 0.5));
  const std::vector<int32_t> ids = restore_bytes(b, nullptr, snap.bytes);
  ASSERT_EQ(ids.size(), 1u);
  expect_same_report(b.compressor().state(ids[0]).auto_report, snap.report);
  // ... and saved again from there, unchanged.
  Session c(m, session_opts(PolicyKind::auto_, 0.5));
  const std::vector<int32_t> ids2 = restore_bytes(c, nullptr, save_bytes(b, ids[0], nullptr));
  expect_same_report(c.compressor().state(ids2.at(0)).auto_report, snap.report);

  const snapshot::Summary sum = inspect_bytes(snap.bytes);
  expect_same_report(sum.sequences.at(0).auto_report, snap.report);
  const std::string json = snapshot::summary_json(sum);
  EXPECT_NE(json.find("\"auto\":{\"layers\":[{\"layer\":0,\"evidence\":\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"uniform_tokens\":" + std::to_string(snap.report.uniform_tokens)), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_loss\":0"), std::string::npos) << json;
  const std::string text = snapshot::summary_text(sum);
  EXPECT_NE(text.find("  auto: " + std::to_string(m->hparams().n_layer) + " layers, mean proxy loss "), std::string::npos) << text;
  EXPECT_NE(text.find("    layer 0: " + std::string(evidence_name(snap.report.layers[0].evidence)) + ", alpha "), std::string::npos) << text;
}

TEST(SnapshotAuto, QualityTargetIsRecordedAndAFixedPolicyHasNoReport) {
  auto m = stories_model();
  const AutoSnapshot snap = auto_snapshot(0.0, 0.05);
  ASSERT_FALSE(snap.report.empty());
  EXPECT_EQ(snap.report.max_loss, 0.05);
  const snapshot::Summary sum = inspect_bytes(snap.bytes);
  EXPECT_EQ(sum.compression.policy, PolicyKind::auto_);
  EXPECT_EQ(sum.compression.max_loss, 0.05);
  EXPECT_NE(snapshot::summary_json(sum).find("\"max_loss\":0.05"), std::string::npos) << snapshot::summary_json(sum);
  EXPECT_NE(snapshot::summary_text(sum).find("policy:       auto (max loss 0.05,"), std::string::npos) << snapshot::summary_text(sum);
  expect_same_report(sum.sequences.at(0).auto_report, snap.report);

  Session a(m, session_opts(PolicyKind::snapkv, 0.5));
  const int32_t seq = a.add_sequence();
  prefill(a, seq, nullptr, long_story(*m));
  const std::vector<uint8_t> b = save_bytes(a, seq, nullptr);
  const snapshot::Summary s2 = inspect_bytes(b);
  EXPECT_TRUE(s2.sequences.at(0).auto_report.empty());
  EXPECT_NE(snapshot::summary_json(s2).find("\"auto\":null"), std::string::npos);
  EXPECT_EQ(snapshot::summary_text(s2).find("auto:"), std::string::npos);
  Session c(m, session_opts(PolicyKind::auto_, 0.5));
  EXPECT_TRUE(c.compressor().state(restore_bytes(c, nullptr, b).at(0)).auto_report.empty());
}

TEST(SnapshotAuto, ACorruptReportIsRefusedAndNothingIsRestored) {
  auto m = stories_model();
  const AutoSnapshot snap = auto_snapshot(0.5, 0.0);
  ASSERT_FALSE(snap.report.empty());
  Session target(m, session_opts(PolicyKind::auto_, 0.5));
  const int32_t t = target.add_sequence();
  prefill(target, t, nullptr, m->tokenizer().encode("Lily had a dog", true));
  Sampler sampler(SamplerParams{});
  const Observed before = observe(target, sampler);
  ASSERT_EQ(restore_status(target, &sampler, snap.bytes), Status::ok);  // the unedited file restores
  target.remove_sequence(target.kv().sequence_ids().back());
  ASSERT_TRUE(observe(target, sampler) == before);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Edit {
    const char *what, *says;
    std::function<void(snap::Sequence *)> edit;
  };
  const Edit edits[] = {
      {"evidence 99", "unknown evidence 99", [](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(0)->mutate_evidence(99); }},
      {"evidence -1", "unknown evidence", [](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(1)->mutate_evidence(-1); }},
      {"NaN loss", "loss", [&](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(0)->mutate_loss(nan); }},
      {"negative loss", "loss", [](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(0)->mutate_loss(-1.0f); }},
      {"negative budget", "budget", [](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(0)->mutate_budget(-1); }},
      {"budget beyond the length", "budget", [](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(0)->mutate_budget(1 << 30); }},
      {"alpha 2", "alpha", [](snap::Sequence *s) { s->mutable_auto_layers()->GetMutableObject(0)->mutate_alpha(2.0f); }},
      {"NaN mean loss", "totals", [](snap::Sequence *s) { ASSERT_TRUE(s->mutate_auto_loss(std::nan(""))); }},
      {"negative tokens", "totals", [](snap::Sequence *s) { ASSERT_TRUE(s->mutate_auto_tokens(-5)); }},
  };
  for (const Edit &e : edits) {
    const std::vector<uint8_t> bad = with_chunk(snap.bytes, 1, [&](snap::Chunk *c) {
      ASSERT_NE(c->mutable_sequence()->auto_layers(), nullptr);
      e.edit(c->mutable_sequence());
    });
    try {
      restore_bytes(target, &sampler, bad);
      ADD_FAILURE() << e.what << ": restored";
    } catch (const Error &err) {
      EXPECT_EQ(err.status(), Status::bad_snapshot) << e.what;
      EXPECT_NE(std::string(err.what()).find("auto report"), std::string::npos) << e.what << ": " << err.what();
      EXPECT_NE(std::string(err.what()).find(e.says), std::string::npos) << e.what << ": " << err.what();
    }
    EXPECT_THROW(inspect_bytes(bad), Error) << e.what;
    EXPECT_TRUE(observe(target, sampler) == before) << e.what;
  }
  target.kv().check_invariants();
}

TEST(SnapshotAuto, ARequestedCompressionsReplayReportRoundTrips) {
  auto m = stories_model();
  Session a(m, session_opts(PolicyKind::auto_, 0.5));
  const int32_t seq = a.add_sequence();
  prefill(a, seq, nullptr, long_story(*m));
  a.compressor().compress(seq, 48);  // asked now, for a later question (the default): the context replay
  const AutoReport r = a.compressor().state(seq).auto_report;
  ASSERT_EQ(static_cast<int32_t>(r.layers.size()), m->hparams().n_layer);
  for (const AutoLayerChoice &c : r.layers) EXPECT_EQ(c.evidence, Evidence::replay);
  Session b(m, session_opts(PolicyKind::auto_, 0.5));
  const std::vector<int32_t> ids = restore_bytes(b, nullptr, save_bytes(a, seq, nullptr));
  ASSERT_EQ(ids.size(), 1u);
  expect_same_report(b.compressor().state(ids[0]).auto_report, r);
  EXPECT_NE(snapshot::summary_text(inspect_bytes(save_bytes(a, seq, nullptr))).find("    layer 0: replay, alpha "),
            std::string::npos);
}
