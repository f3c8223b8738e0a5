// Which question a compression serves (DESIGN.md §9, "Which question"): the probe question and the context replay
// (src/session/replay.cpp) leave the sequence exactly as it was, the question decides whose queries rank the tokens,
// a full pool falls back to the window instead of failing, and kvzip compresses to its budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compress/policy_table.hpp"
#include "compress/policy.hpp"
#include "compress/scores.hpp"
#include "session/session.hpp"
#include "support/stories_model.hpp"
#include "support/story_text.hpp"
#include "util/error.hpp"

using infokv::PolicyKind;
using infokv::Question;
using infokv::Session;
using infokv::SessionOptions;

namespace {

SessionOptions with_policy(PolicyKind p, double fraction) {
  SessionOptions o;
  o.n_threads = 2;
  o.compression.policy = p;
  o.compression.budget_fraction = fraction;
  o.compression.compress_after_prefill = false;  // the tests compress explicitly
  return o;
}

// Everything a caller or a later step can see of a sequence.
struct Seen {
  infokv::SeqInfo info;
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::vector<std::vector<int32_t>> pos;
  std::vector<std::vector<float>> window_q;
  std::vector<int32_t> window_pos;
  int64_t free_blocks = 0;
};

Seen seen(Session &s, int32_t seq) {
  Seen v;
  v.info = s.info(seq);
  v.tokens = s.tokens(seq);
  v.logits = s.logits(seq);
  const infokv::SeqCache &c = s.kv().seq(seq);
  for (const infokv::LayerSlots &L : c.layers) v.pos.push_back(L.pos);
  for (const infokv::CowRows &r : c.window_q) v.window_q.push_back(r.get());
  v.window_pos = c.window_pos;
  v.free_blocks = s.kv().free_blocks();
  return v;
}

void expect_same(const Seen &a, const Seen &b) {
  EXPECT_EQ(a.info.length, b.info.length);
  EXPECT_EQ(a.info.kept_per_layer, b.info.kept_per_layer);
  EXPECT_EQ(a.info.bytes, b.info.bytes);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.pos, b.pos);
  EXPECT_EQ(a.window_q, b.window_q);
  EXPECT_EQ(a.window_pos, b.window_pos);
  EXPECT_EQ(a.free_blocks, b.free_blocks);
}

std::vector<int32_t> story(const Session &s, size_t n) { return infokv_test::story_tokens(s.model().tokenizer(), n); }

}  // namespace

TEST(Question, NamesRoundTripAndUnknownOnesAreRefused) {
  for (Question q : {Question::both, Question::next, Question::later}) EXPECT_EQ(infokv::parse_question(infokv::question_name(q)), q);
  EXPECT_THROW(infokv::parse_question("soon"), infokv::Error);
  infokv::CompressionConfig c;
  c.policy = PolicyKind::snapkv;
  c.budget_fraction = 0.5;
  c.question = static_cast<Question>(7);
  EXPECT_THROW(c.validate(), infokv::Error);
}

TEST(Question, TheProbeLeavesTheSequenceExactlyAsItWasAndSeesAllOfIt) {
  auto m = infokv_test::stories_model();
  Session s(m, with_policy(PolicyKind::snapkv, 0.5));
  const int32_t id = s.add_sequence();
  s.prefill(id, story(s, 120));
  const Seen before = seen(s, id);
  const infokv::ProbeRows pr = s.probe_queries(id);
  expect_same(before, seen(s, id));
  // Each probe question's rows in turn, each at the positions right after the sequence.
  std::vector<int32_t> want_pos;
  for (const std::vector<int32_t> &p : s.probe_prompts()) {
    ASSERT_GT(p.size(), 0u);
    for (size_t i = 0; i < p.size(); ++i) want_pos.push_back(static_cast<int32_t>(before.info.length + static_cast<int64_t>(i)));
  }
  const auto P = static_cast<int32_t>(want_pos.size());
  EXPECT_EQ(pr.pos, want_pos);
  const auto &hp = m->hparams();
  ASSERT_EQ(pr.q.size(), static_cast<size_t>(hp.n_layer));
  for (const auto &rows : pr.q) EXPECT_EQ(rows.size(), static_cast<size_t>(P) * hp.n_head * hp.head_dim);
  // A fork shares every block with its source, the last one too: the probe copies nothing for good.
  const int32_t f = s.fork_sequence(id);
  const Seen fork_before = seen(s, f);
  s.probe_queries(f);
  expect_same(fork_before, seen(s, f));
  s.remove_sequence(f);
  // The next step reads the cache as if the probe had never run.
  Session twin(m, with_policy(PolicyKind::snapkv, 0.5));
  const int32_t tw = twin.add_sequence();
  twin.prefill(tw, story(twin, 120));
  s.decode({{id, 42, true}});
  twin.decode({{tw, 42, true}});
  EXPECT_EQ(s.logits(id), twin.logits(tw));
}

TEST(Question, TheContextReplayLeavesTheSequenceAsItWasAndScoresEverySlot) {
  auto m = infokv_test::stories_model();
  SessionOptions o = with_policy(PolicyKind::kvzip, 0.5);
  o.ubatch = 32;  // several replayed chunks
  Session s(m, o);
  const int32_t id = s.add_sequence();
  s.prefill(id, story(s, 150));
  const Seen before = seen(s, id);
  const infokv::ReplayEvidence ev = s.replay_evidence(id);
  expect_same(before, seen(s, id));
  ASSERT_EQ(ev.score.size(), before.pos.size());
  EXPECT_GT(ev.tokens, 150);  // every token, and a prompt per chunk
  for (size_t l = 0; l < ev.score.size(); ++l) {
    ASSERT_EQ(ev.score[l].size(), before.pos[l].size());
    for (float x : ev.score[l]) {
      EXPECT_GE(x, 0.0f);
      EXPECT_LE(x, 1.0f);
    }
    EXPECT_GT(*std::max_element(ev.score[l].begin(), ev.score[l].end()), 0.0f);
  }
}

TEST(Question, TheQuestionDecidesWhoseQueriesRankTheTokensAndIsReported) {
  auto m = infokv_test::stories_model();
  for (PolicyKind p : {PolicyKind::snapkv, PolicyKind::auto_}) {
    Session s(m, with_policy(p, 0.3));
    const int32_t id = s.add_sequence();
    s.prefill(id, story(s, 200));
    std::vector<std::vector<std::vector<int32_t>>> kept;
    for (Question q : {Question::next, Question::later, Question::both}) {
      const int32_t f = s.fork_sequence(id);
      s.compressor().compress(f, 0, q);
      EXPECT_EQ(s.compressor().state(f).question, q) << infokv::policy_name(p);
      EXPECT_EQ(s.compressor().state(f).probe_seconds > 0, q != Question::next);
      std::vector<std::vector<int32_t>> pos;
      for (const infokv::LayerSlots &L : s.kv().seq(f).layers) pos.push_back(L.pos);
      kept.push_back(pos);
      EXPECT_LE(s.compressor().mean_kept(f), 0.3 * 200 + 16) << infokv::policy_name(p);
      s.decode({{f, 7, true}});  // the compressed fork goes on
      s.remove_sequence(f);
    }
    EXPECT_NE(kept[0], kept[1]) << infokv::policy_name(p) << ": the probe's queries chose the same tokens as the window's";
  }
}

TEST(Question, AFullPoolFallsBackToTheWindowInsteadOfFailing) {
  auto m = infokv_test::stories_model();
  int64_t used = 0;
  {
    Session s(m, with_policy(PolicyKind::snapkv, 0.5));
    const int32_t id = s.add_sequence();
    s.prefill(id, story(s, 96));
    used = s.kv().stats().blocks_used;
  }
  // auto, asked for a later question, would replay the context first: no room for that either.
  for (PolicyKind p : {PolicyKind::snapkv, PolicyKind::auto_}) {
    SessionOptions o = with_policy(p, 0.5);
    o.kv_pool_blocks = used;  // the sequence fills the pool: no room for the probe
    Session s(m, o);
    const int32_t id = s.add_sequence();
    s.prefill(id, story(s, 96));
    ASSERT_EQ(s.kv().free_blocks(), 0);
    EXPECT_THROW(s.probe_queries(id), infokv::Error);
    EXPECT_THROW(s.replay_evidence(id), infokv::Error);
    const Seen before = seen(s, id);
    expect_same(before, seen(s, id));
    s.compressor().compress(id, 0, Question::later);
    EXPECT_EQ(s.compressor().state(id).question, Question::next) << infokv::policy_name(p);
    EXPECT_LT(s.info(id).bytes, before.info.bytes) << infokv::policy_name(p);
    if (p == PolicyKind::auto_) {
      for (const infokv::AutoLayerChoice &c : s.compressor().state(id).auto_report.layers) EXPECT_NE(c.evidence, infokv::Evidence::replay);
    }
  }
}

TEST(Question, AutoAskedNowForALaterQuestionReadsTheContextReplayAndTheProbe) {
  auto m = infokv_test::stories_model();
  Session a(m, with_policy(PolicyKind::auto_, 0.25)), z(m, with_policy(PolicyKind::kvzip, 0.25));
  const std::vector<int32_t> t = story(a, 160);
  const int32_t ia = a.add_sequence(), iz = z.add_sequence();
  a.prefill(ia, t);
  z.prefill(iz, t);
  // Each occasion and question that keeps the probe, on a fork: automatic compressions, the next tokens, a quality target.
  const auto evidence_of = [&](int32_t f) {
    std::set<infokv::Evidence> e;
    for (const infokv::AutoLayerChoice &c : a.compressor().state(f).auto_report.layers) e.insert(c.evidence);
    return e;
  };
  {
    const int32_t f = a.fork_sequence(ia);
    ASSERT_TRUE(a.compressor().try_compress(f, 0));
    EXPECT_EQ(a.compressor().state(f).question, Question::later);
    EXPECT_EQ(evidence_of(f).count(infokv::Evidence::replay), 0u) << "an automatic compression replayed the context";
    a.remove_sequence(f);
  }
  {
    const int32_t f = a.fork_sequence(ia);
    a.compressor().compress(f, 0, Question::next);
    EXPECT_EQ(evidence_of(f).count(infokv::Evidence::replay), 0u);
    a.remove_sequence(f);
  }
  {
    SessionOptions o = with_policy(PolicyKind::auto_, 0.0);
    o.compression.max_loss = 0.01;
    Session q(m, o);
    const int32_t f = q.add_sequence();
    q.prefill(f, t);
    q.compressor().compress(f, 0, Question::later);
    for (const infokv::AutoLayerChoice &c : q.compressor().state(f).auto_report.layers) EXPECT_NE(c.evidence, infokv::Evidence::replay);
  }
  {  // nothing over the budget: no replay is spent on it, and kvzip keeps everything
    const int32_t f = a.fork_sequence(ia), g = z.fork_sequence(iz);
    a.compressor().compress(f, 4096);
    z.compressor().compress(g, 4096);
    EXPECT_EQ(evidence_of(f).count(infokv::Evidence::replay), 0u);
    EXPECT_EQ(a.kv().seq(f).layers[0].n(), static_cast<int32_t>(t.size()));
    for (const infokv::LayerSlots &L : z.kv().seq(g).layers) EXPECT_EQ(L.n(), static_cast<int32_t>(t.size()));
    a.remove_sequence(f);
    z.remove_sequence(g);
  }
  // A request for a later question under a byte budget: kvzip's spread over the layers, and in each layer what the
  // replay or the probe ranks high, reported as auto's.
  a.compressor().compress(ia);
  z.compressor().compress(iz);
  bool differs = false;
  const infokv::SeqCompression &st = a.compressor().state(ia);
  EXPECT_EQ(st.question, Question::later);
  EXPECT_GT(st.probe_seconds, 0.0);
  const infokv::AutoReport &r = st.auto_report;
  ASSERT_EQ(r.layers.size(), a.kv().seq(ia).layers.size());
  const int32_t bs = a.kv().config().block_size;
  int64_t kept = 0;
  double loss = 0;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const infokv::LayerSlots &La = a.kv().seq(ia).layers[l], &Lz = z.kv().seq(iz).layers[l];
    EXPECT_EQ(La.n(), Lz.n()) << "layer " << l;  // the replay's spread
    EXPECT_EQ(La.pos.back(), Lz.pos.back()) << "layer " << l;  // the window
    differs = differs || La.pos != Lz.pos;
    EXPECT_EQ(r.layers[l].evidence, infokv::Evidence::replay);
    EXPECT_EQ(r.layers[l].budget, a.kv().seq(ia).layers[l].n());
    EXPECT_FLOAT_EQ(r.layers[l].alpha, 1.0f);
    EXPECT_GT(r.layers[l].loss, 0.0f);  // something was dropped, and it drew some of the replay's attention
    EXPECT_LT(r.layers[l].loss, 1.0f);
    kept += r.layers[l].budget;
    loss += r.layers[l].loss / static_cast<double>(r.layers.size());
  }
  EXPECT_EQ(r.tokens, kept);
  EXPECT_EQ(r.uniform_tokens, static_cast<int64_t>(r.layers.size()) * infokv::whole_block_budget(40, bs));
  EXPECT_NEAR(r.loss, loss, 1e-6);
  EXPECT_EQ(r.max_loss, 0.0);
  EXPECT_TRUE(differs) << "the probe changed no layer's kept set";
  a.decode({{ia, 9, true}});
}

TEST(Question, KvzipCompressesToItsBudgetKeepingTheWindow) {
  auto m = infokv_test::stories_model();
  Session s(m, with_policy(PolicyKind::kvzip, 0.25));
  const int32_t id = s.add_sequence();
  const std::vector<int32_t> t = story(s, 160);
  s.prefill(id, t);
  s.compressor().compress(id);
  const infokv::SeqCache &c = s.kv().seq(id);
  // Its budget spread over the layers by the replay's ranks (global_layer_budgets): whole blocks, as many in all
  // as a uniform 40 tokens per layer hold.
  const int32_t bs = s.kv().config().block_size;
  const int32_t uniform = infokv::whole_block_budget(40, bs);  // the fixed policies' block rule
  int64_t blocks = 0;
  for (const infokv::LayerSlots &L : c.layers) {
    EXPECT_TRUE(L.n() % bs == 0 || L.n() == static_cast<int32_t>(t.size())) << L.n();
    EXPECT_GE(L.n(), std::min(bs, 40));
    blocks += (L.n() + bs - 1) / bs;
    EXPECT_EQ(L.pos.back(), static_cast<int32_t>(t.size()) - 1);  // the latest token is in the window
  }
  EXPECT_EQ(blocks, static_cast<int64_t>(c.layers.size()) * ((uniform + bs - 1) / bs));
  s.decode({{id, 9, true}});
}
