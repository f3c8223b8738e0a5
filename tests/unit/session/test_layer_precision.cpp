// auto choosing, per layer, the precision beside the tokens under a byte budget (DESIGN §9 "How precisely"), on
// real models: SmolLM2-135M (no biases) and Qwen2.5-Coder-0.5B (K biases, which a q8_0 layer stores keys less of).
// The bytes stay within the budget's, sequences decode on, a batch that mixes layer dtypes gives each sequence the
// bits it gets alone, and snapshots keep each layer's dtype (format 4), continue exactly, convert into other
// caches and refuse hostile layer dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "infokv_fb/snapshot_generated.h"
#include "snapshot/snapshot.hpp"
#include "support/paths.hpp"
#include "support/smollm2_model.hpp"
#include "support/qwen_model.hpp"
#include "support/session_io.hpp"
#include "support/snapshot.hpp"
#include "support/util.hpp"
#include "util/error.hpp"

using namespace infokv;
using namespace infokv_test;

namespace {

// 480 tokens of Emma, from a place no setting was tuned at.
std::vector<int32_t> text_tokens(const Model &m) {
  const std::string text = read_text(corpora_dir() + "/emma.txt");
  std::vector<int32_t> t = m.tokenizer().encode(text.substr(200000, 4000), true);
  t.resize(480);
  return t;
}

// auto on request only (as `infokv eval` compresses), f16 K/V.
SessionOptions auto_opts(KvDtype dt = KvDtype::f16, bool layer_precision = true) {
  SessionOptions o = session_opts(PolicyKind::auto_, 1.0, INT32_MAX, dt);
  o.kv_pool_blocks = 4096;
  o.compression.compress_after_prefill = false;
  o.compression.layer_precision = layer_precision;
  return o;
}

int count_layers(const Session &s, int32_t id, KvDtype dt) {
  int n = 0;
  for (const LayerSlots &L : s.kv().seq(id).layers) n += L.dtype == dt ? 1 : 0;
  return n;
}

std::vector<KvDtype> layer_dtypes(const Session &s, int32_t id) {
  std::vector<KvDtype> d;
  for (const LayerSlots &L : s.kv().seq(id).layers) d.push_back(L.dtype);
  return d;
}

// A sequence of `toks` compressed by auto to `budget` tokens for the next tokens (the question the window's rows
// stand for, where auto may choose precision).
int32_t compressed(Session &s, const std::vector<int32_t> &toks, int32_t budget) {
  const int32_t id = s.add_sequence();
  prefill(s, id, nullptr, toks);
  s.compressor().compress(id, budget, Question::next);
  return id;
}

}  // namespace

// Under a byte budget auto holds some layers at q8_0 (more tokens in the same blocks), never more blocks than the
// uniform f16 budget takes, and the sequence decodes on with new tokens stored in each layer's dtype. With
// layer_precision off every layer stays f16.
TEST(LayerPrecision, AutoHoldsLayersAtQ8WithinTheBudgetsBytes) {
  REQUIRE_SMOLLM2(small);
  REQUIRE_QWEN(qw);
  for (const auto &m : {small, qw}) {
    const std::vector<int32_t> toks = text_tokens(*m);
    const int32_t budget = 60;  // 12.5%
    const int64_t uniform_blocks = static_cast<int64_t>(m->hparams().n_layer) * ((budget + 15) / 16);
    Session on(m, auto_opts());
    const int32_t a = compressed(on, toks, budget);
    on.kv().check_invariants();
    EXPECT_GT(count_layers(on, a, KvDtype::q8_0), 0) << m->hparams().n_layer << " layers";
    EXPECT_EQ(count_layers(on, a, KvDtype::q8_0) + count_layers(on, a, KvDtype::f16), m->hparams().n_layer);
    EXPECT_LE(on.info(a).blocks, uniform_blocks);
    // The memory trigger counts a q8_0 token by its bytes: the sequence is within its budget, not over it.
    EXPECT_LE(on.compressor().mean_kept(a), budget + on.compressor().slack_for(budget));
    const std::vector<int32_t> next = {toks[10], toks[11], toks[12], toks[13], toks[14], toks[15], toks[16], toks[17]};
    for (const auto &lg : feed(on, a, next))
      for (float v : lg) ASSERT_TRUE(std::isfinite(v));
    on.kv().check_invariants();
    // An automatic compression for a later question (a probe's rows, the default of generate and chat): each layer
    // keeps its uniform blocks and may hold more tokens in them at q8_0.
    Session later(m, auto_opts());
    const int32_t c = later.add_sequence();
    prefill(later, c, nullptr, toks);
    later.compressor().compress(c, budget, Question::later, Occasion::automatic);
    EXPECT_EQ(later.compressor().state(c).question, Question::later);
    EXPECT_GT(count_layers(later, c, KvDtype::q8_0), 0) << m->hparams().n_layer << " layers, probe";
    for (const LayerSlots &L : later.kv().seq(c).layers)
      EXPECT_EQ(static_cast<int64_t>(L.blocks.size()), (budget + 15) / 16) << "a layer left its uniform blocks";
    Session off(m, auto_opts(KvDtype::f16, false));
    const int32_t b = compressed(off, toks, budget);
    EXPECT_EQ(count_layers(off, b, KvDtype::f16), m->hparams().n_layer);
    EXPECT_LE(off.info(b).blocks, uniform_blocks);
  }
}

// A compression asked for a later question (the default question of ikv_seq_compress: auto reads the context replay)
// keeps every layer in the session's dtype: holding them at q8_0 with twice the tokens measured no better for
// retrieval (packaging/docs/kv_dtypes.md), and the replay's scores are no loss to weigh rounding against.
TEST(LayerPrecision, ARequestForALaterQuestionKeepsEveryLayerInTheSessionsDtype) {
  REQUIRE_SMOLLM2(small);
  REQUIRE_QWEN(qw);
  for (const auto &m : {small, qw}) {
    const std::vector<int32_t> toks = text_tokens(*m);
    const int32_t budget = 120;  // 25%: 8 blocks of 16 f16 tokens, 240 q8_0 tokens
    for (bool lp : {true, false}) {
      Session s(m, auto_opts(KvDtype::f16, lp));
      const int32_t id = s.add_sequence();
      prefill(s, id, nullptr, toks);
      s.compressor().compress(id, budget);  // the config's question: later
      const AutoReport &r = s.compressor().state(id).auto_report;
      ASSERT_FALSE(r.empty());
      for (const AutoLayerChoice &ch : r.layers) EXPECT_EQ(ch.evidence, Evidence::replay);
      const int n = m->hparams().n_layer;
      EXPECT_EQ(count_layers(s, id, KvDtype::f16), n) << n << " layers, layer_precision " << lp;
      EXPECT_LE(s.info(id).blocks, static_cast<int64_t>(n) * (budget + 15) / 16);
      EXPECT_LE(r.tokens, static_cast<int64_t>(n) * budget + n * 16);
      s.kv().check_invariants();
    }
  }
}

// One decode step of a sequence with q8_0 layers batched with one whose layers are all f16 (the batch cannot read
// every row with one geometry, and only the q8_0 layers' keys lose the K bias): each gets the logits it gets alone.
TEST(LayerPrecision, BatchMixingLayerDtypesGivesEachSequenceItsOwnBits) {
  REQUIRE_SMOLLM2(small);
  REQUIRE_QWEN(qw);
  for (const auto &m : {small, qw}) {
    const std::vector<int32_t> toks = text_tokens(*m);
    Session s(m, auto_opts());
    const int32_t mixed = compressed(s, toks, 60);
    ASSERT_GT(count_layers(s, mixed, KvDtype::q8_0), 0);
    const int32_t plain = s.add_sequence();
    prefill(s, plain, nullptr, std::vector<int32_t>(toks.begin(), toks.begin() + 100));
    const int32_t mixed_alone = s.fork_sequence(mixed), plain_alone = s.fork_sequence(plain);
    for (int step = 0; step < 3; ++step) {
      const int32_t t = toks[static_cast<size_t>(200 + step)];
      s.decode({{mixed, t, false}, {plain, t, false}});
      s.decode({{mixed_alone, t, false}});
      s.decode({{plain_alone, t, false}});
      EXPECT_EQ(s.logits(mixed), s.logits(mixed_alone)) << m->hparams().n_layer << " layers, step " << step;
      EXPECT_EQ(s.logits(plain), s.logits(plain_alone)) << m->hparams().n_layer << " layers, step " << step;
    }
    // Without a policy a decode batch runs each layer's attention for every sequence in one call, which reads one
    // geometry: layers converted by hand in one sequence must take it out of that path.
    Session n(m, session_opts(PolicyKind::none, 0.0, 1024, KvDtype::f16));
    const int32_t x = n.add_sequence(), y = n.add_sequence();
    prefill(n, x, nullptr, std::vector<int32_t>(toks.begin(), toks.begin() + 90));
    prefill(n, y, nullptr, std::vector<int32_t>(toks.begin() + 100, toks.begin() + 170));
    for (int32_t l = 0; l < m->hparams().n_layer; l += 2) n.kv().convert_layer(x, l, KvDtype::q8_0, m->layer(l).bk);
    const int32_t x1 = n.fork_sequence(x), y1 = n.fork_sequence(y);
    for (int step = 0; step < 2; ++step) {
      const int32_t t = toks[static_cast<size_t>(300 + step)];
      n.decode({{x, t, false}, {y, t, false}});
      n.decode({{x1, t, false}});
      n.decode({{y1, t, false}});
      EXPECT_EQ(n.logits(x), n.logits(x1)) << m->hparams().n_layer << " layers, policy none, step " << step;
      EXPECT_EQ(n.logits(y), n.logits(y1)) << m->hparams().n_layer << " layers, policy none, step " << step;
    }
  }
}

// A snapshot keeps each layer's dtype (format 4): restored into a session like the first it holds the same layers
// and continues with the same logits bit for bit; into an f32 or a q8_0 cache every layer takes that cache's dtype
// and the continuation stays finite.
TEST(LayerPrecision, SnapshotsKeepLayerDtypesAndContinueExactly) {
  REQUIRE_QWEN(m);
  const std::vector<int32_t> toks = text_tokens(*m);
  Session a(m, auto_opts());
  const int32_t id = compressed(a, toks, 60);
  ASSERT_GT(count_layers(a, id, KvDtype::q8_0), 0);
  const std::vector<uint8_t> snap = save_bytes(a, id);
  {
    snapshot::MemorySource src(snap.data(), snap.size());
    const snapshot::Summary sum = snapshot::inspect(src);
    EXPECT_EQ(sum.kv_dtype, KvDtype::f16);
    EXPECT_EQ(sum.min_reader_version, snapshot::kLayerDtypeVersion);
    EXPECT_EQ(sum.format_version, snapshot::kLayerDtypeVersion);
  }
  Session b(m, auto_opts());
  std::vector<int32_t> ids;
  ASSERT_EQ(restore_status(b, snap, &ids), Status::ok);
  EXPECT_EQ(layer_dtypes(b, ids.at(0)), layer_dtypes(a, id));
  EXPECT_EQ(b.info(ids.at(0)).blocks, a.info(id).blocks);
  const std::vector<int32_t> next = {toks[300], toks[301], toks[302], toks[303]};
  const auto want = feed(a, id, next), got = feed(b, ids.at(0), next);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "step " << i;
  for (KvDtype other : {KvDtype::f32, KvDtype::q8_0}) {
    Session c(m, auto_opts(other));
    std::vector<int32_t> cid;
    ASSERT_EQ(restore_status(c, snap, &cid), Status::ok) << kv_dtype_name(other);
    EXPECT_EQ(count_layers(c, cid.at(0), other), m->hparams().n_layer) << kv_dtype_name(other);
    for (const auto &lg : feed(c, cid.at(0), next))
      for (float v : lg) ASSERT_TRUE(std::isfinite(v));
  }
}

// A layer dtype that is no dtype, one in a file that claims readers before version 4, or chunks of one layer that
// differ: refused as bad_snapshot, the target session as it was.
TEST(LayerPrecision, HostileLayerDtypesAreRefused) {
  REQUIRE_SMOLLM2(m);
  const std::vector<int32_t> toks = text_tokens(*m);
  Session a(m, auto_opts());
  const int32_t id = compressed(a, toks, 60);
  ASSERT_GT(count_layers(a, id, KvDtype::q8_0), 0);
  snapshot::SaveOptions so;
  so.max_chunk_bytes = 20000;  // several chunks per layer
  snapshot::VectorSink sink;
  snapshot::save(a, id, nullptr, sink, so);
  const std::vector<uint8_t> snap = sink.bytes();
  Session target(m, auto_opts());
  const int32_t keep = target.add_sequence();
  prefill(target, keep, nullptr, {toks[0], toks[1]});
  const std::vector<float> before = target.logits(keep);
  const int64_t used = target.kv().stats().blocks_used;
  const auto chunks = split_chunks(snap);
  // The first chunk of a q8_0 layer, and whether the next chunk is of the same layer.
  size_t q8 = 0;
  for (size_t c = 2; c < chunks.size() && q8 == 0; ++c) {
    const auto *L = flatbuffers::GetRoot<snap::Chunk>(chunks[c].data())->layer();
    if (L != nullptr && L->kv_dtype() == snap::KvDtype::Q8_0) q8 = c;
  }
  ASSERT_GT(q8, 0u);
  for (int16_t bad_dt : {int16_t{9}, int16_t{-1}, int16_t{2}}) {
    auto bad = chunks;
    auto *L = flatbuffers::GetMutableRoot<snap::Chunk>(bad[q8].data())->mutable_layer();
    ASSERT_TRUE(L->mutate_kv_dtype(static_cast<snap::KvDtype>(bad_dt)));
    // 9 and -1: no dtype; 2 (f16): the rows no longer fill the sizes that dtype needs.
    EXPECT_EQ(restore_status(target, join_chunks(bad)), Status::bad_snapshot) << bad_dt;
  }
  {
    auto bad = chunks;
    ASSERT_TRUE(flatbuffers::GetMutableRoot<snap::Chunk>(bad[0].data())->mutable_header()->mutate_min_reader_version(3));
    EXPECT_EQ(restore_status(target, join_chunks(bad)), Status::bad_snapshot);
  }
  {  // the second chunk of the layer in another dtype
    const auto *L0 = flatbuffers::GetRoot<snap::Chunk>(chunks[q8].data())->layer();
    const auto *L1 = flatbuffers::GetRoot<snap::Chunk>(chunks[q8 + 1].data())->layer();
    ASSERT_EQ(L0->layer(), L1->layer()) << "the layer was not split into chunks";
    auto bad = chunks;
    ASSERT_TRUE(flatbuffers::GetMutableRoot<snap::Chunk>(bad[q8 + 1].data())->mutable_layer()->mutate_kv_dtype(snap::KvDtype::Q4_0));
    EXPECT_EQ(restore_status(target, join_chunks(bad)), Status::bad_snapshot);
  }
  EXPECT_EQ(target.kv().sequence_ids(), std::vector<int32_t>{keep});
  EXPECT_EQ(target.kv().stats().blocks_used, used);
  EXPECT_EQ(target.logits(keep), before);
  EXPECT_EQ(restore_status(target, snap), Status::ok);  // and the intact file restores
}
