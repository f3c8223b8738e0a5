// The engine (src/engine): many conversations over a pool that holds a few of them. Moved conversations resume
// bit-exactly, recomputed ones with the same tokens (and the same kept set when compressed), nothing fails while an
// option exists, a spill file damaged while out is recomputed instead of trusted, and bad calls change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "compress/policy_table.hpp"
#include "engine/engine.hpp"
#include "support/random_inputs.hpp"
#include "support/stories_model.hpp"
#include "support/smollm2_model.hpp"
#include "support/util.hpp"
#include "support/paths.hpp"
#include "util/error.hpp"

using namespace infokv;

namespace {

constexpr int kConversations = 5;
constexpr int32_t kGen = 20;

struct Script {
  std::vector<std::vector<int32_t>> turn1, turn2;
};

Script make_script(uint32_t seed) {
  std::mt19937 rng(seed);
  Script s;
  for (int i = 0; i < kConversations; ++i) {
    std::vector<int32_t> a{1}, b;
    for (int j = 0; j < 40; ++j) a.push_back(3 + static_cast<int32_t>(rng() % 500));
    for (int j = 0; j < 10; ++j) b.push_back(3 + static_cast<int32_t>(rng() % 500));
    s.turn1.push_back(a);
    s.turn2.push_back(b);
  }
  return s;
}

struct Outcome {
  std::vector<std::vector<int32_t>> generated;   // per conversation, both turns
  std::vector<std::vector<float>> logits;        // per conversation, every reported token's logits, concatenated
  std::vector<TurnState> final_state;
  EngineStats stats;
  std::vector<Decision> decisions;
};

EngineOptions options(Strategy st, int64_t pool_blocks, bool policy) {
  EngineOptions o;
  o.strategy = st;
  o.session.n_threads = 2;
  o.session.kv_dtype = KvDtype::f32;
  o.session.kv_pool_blocks = pool_blocks;
  if (policy) {
    o.session.compression.policy = PolicyKind::auto_;
    o.session.compression.budget_fraction = 1.0;  // compressed only when memory runs out
  }
  o.assume_prefill_tokens_per_s = 5000;
  o.assume_disk_bytes_per_s = 1e9;
  return o;
}

// Every conversation: turn 1, three idle steps, turn 2 (its answers forced to `forced` when given), greedy.
Outcome run(const EngineOptions &o, const Script &sc, const std::vector<std::vector<int32_t>> *forced = nullptr,
            const std::function<void(Engine &, int64_t step)> &meddle = {}) {
  Engine e(infokv_test::stories_model(), o);
  Outcome out;
  std::vector<int64_t> ids;
  std::vector<int> turn(kConversations, 1);
  std::vector<int64_t> done_at(kConversations, -1);
  out.generated.resize(kConversations);
  out.logits.resize(kConversations);
  for (int i = 0; i < kConversations; ++i) {
    ids.push_back(e.open());
    Turn t{sc.turn1[static_cast<size_t>(i)], kGen, {}, {}};
    if (forced) t.forced.assign((*forced)[static_cast<size_t>(i)].begin(), (*forced)[static_cast<size_t>(i)].begin() + kGen);
    e.submit(ids.back(), t);
  }
  for (int64_t step = 0; step < 5000; ++step) {
    for (const TokenEvent &ev : e.step()) {
      const size_t i = static_cast<size_t>(ev.conversation - ids[0]);
      out.generated[i].push_back(ev.token);
      out.logits[i].insert(out.logits[i].end(), ev.logits->begin(), ev.logits->end());
    }
    if (meddle) meddle(e, step);
    for (int i = 0; i < kConversations; ++i) {
      const TurnState st = e.state(ids[static_cast<size_t>(i)]);
      if (turn[static_cast<size_t>(i)] == 1 && st == TurnState::done) {
        if (done_at[static_cast<size_t>(i)] < 0) done_at[static_cast<size_t>(i)] = step;
        if (step - done_at[static_cast<size_t>(i)] >= 3) {
          Turn t{sc.turn2[static_cast<size_t>(i)], kGen, {}, {}};
          if (forced) t.forced.assign((*forced)[static_cast<size_t>(i)].begin() + kGen, (*forced)[static_cast<size_t>(i)].end());
          e.submit(ids[static_cast<size_t>(i)], t);
          turn[static_cast<size_t>(i)] = 2;
        }
      }
    }
    bool all = true;
    for (int i = 0; i < kConversations; ++i)
      if (turn[static_cast<size_t>(i)] == 1 ? e.state(ids[static_cast<size_t>(i)]) != TurnState::failed
                                            : e.busy())
        all = false;
    if (all && !e.busy()) break;
  }
  for (int64_t id : ids) out.final_state.push_back(e.state(id));
  out.stats = e.stats();
  out.decisions = e.decisions();
  e.session().kv().check_invariants();
  return out;
}

// 5 conversations of 90 tokens on stories260K (5 layers, blocks of 16): 30 blocks each; 75 hold two and a half.
constexpr int64_t kSmallPool = 75;
constexpr int64_t kLargePool = 400;

// Runs turn `q` in a new conversation (pushing conversation `a` out of a pool too small for both: it is dropped),
// then a short turn of `a` (recomputed to come back); returns, per layer of `a`, the positions it holds below
// `old_len` (those it held before the new turn).
std::vector<std::vector<int32_t>> drop_and_bring_back(Engine &e, int64_t a, const std::vector<int32_t> &q, size_t old_len) {
  const int64_t b = e.open(1);
  e.submit(b, {q, 10, {}, {}});
  while (e.busy()) e.step();
  EXPECT_EQ(e.state(b), TurnState::done);
  EXPECT_EQ(e.where(a), Where::dropped);
  EXPECT_STREQ(where_name(e.where(a)), "dropped");
  e.submit(a, {{5, 6, 7}, 0, {}, {}});
  while (e.busy()) e.step();
  EXPECT_EQ(e.state(a), TurnState::done) << e.failure(a);
  std::vector<std::vector<int32_t>> out;
  if (e.sequence(a) < 0) return out;
  for (const LayerSlots &L : e.session().kv().seq(e.sequence(a)).layers) {
    std::vector<int32_t> &now = out.emplace_back();
    for (int32_t pos : L.pos)
      if (pos < static_cast<int32_t>(old_len)) now.push_back(pos);
  }
  return out;
}

TEST(Engine, UnlimitedPoolNeedsNoDecision) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome ref = run(options(Strategy::automatic, kLargePool, true), sc);
  for (TurnState s : ref.final_state) EXPECT_EQ(s, TurnState::done);
  for (const auto &g : ref.generated) EXPECT_EQ(g.size(), 2u * kGen);
  EXPECT_TRUE(ref.decisions.empty());
}

TEST(Engine, MovedConversationsResumeBitExactly) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome ref = run(options(Strategy::automatic, kLargePool, false), sc);
  const Outcome mv = run(options(Strategy::move, kSmallPool, false), sc);
  EXPECT_GT(mv.stats.moves, 0);
  EXPECT_GT(mv.stats.bytes_moved, 0);
  for (int i = 0; i < kConversations; ++i) {
    EXPECT_EQ(mv.final_state[static_cast<size_t>(i)], TurnState::done);
    EXPECT_EQ(mv.generated[static_cast<size_t>(i)], ref.generated[static_cast<size_t>(i)]) << "conversation " << i;
    EXPECT_EQ(mv.logits[static_cast<size_t>(i)], ref.logits[static_cast<size_t>(i)]) << "conversation " << i;
  }
  for (const Decision &d : mv.decisions) {
    EXPECT_EQ(d.action, Action::move);
    EXPECT_GE(d.measured_seconds, 0) << "a move's cost is measured once it is back";
  }
}

// Every conversation of `rc` done with the tokens of `ref`, its logits within 1e-3 (a recompute's chunked prefill
// against token-by-token decode: the same math in another order).
void expect_same_answers(const Outcome &rc, const Outcome &ref) {
  for (int i = 0; i < kConversations; ++i) {
    EXPECT_EQ(rc.final_state[static_cast<size_t>(i)], TurnState::done);
    EXPECT_EQ(rc.generated[static_cast<size_t>(i)], ref.generated[static_cast<size_t>(i)]) << "conversation " << i;
    const auto &a = rc.logits[static_cast<size_t>(i)], &b = ref.logits[static_cast<size_t>(i)];
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, static_cast<double>(std::fabs(a[j] - b[j])));
    EXPECT_LT(worst, 1e-3) << "conversation " << i;
  }
}

TEST(Engine, RecomputedConversationsContinueWithTheSameTokens) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome ref = run(options(Strategy::automatic, kLargePool, false), sc);
  const Outcome rc = run(options(Strategy::recompute, kSmallPool, false), sc);
  EXPECT_GT(rc.stats.recomputes, 0);
  EXPECT_GT(rc.stats.recomputed_tokens, 0);
  expect_same_answers(rc, ref);
}

// With a prefix cache, a dropped conversation comes back from the longest cached prefix of its tokens (its first
// prompt, saved when it went in) and prefills only the rest: the same tokens, its cost model told.
TEST(Engine, ARecomputeStartsFromThePrefixCacheAndContinuesWithTheSameTokens) {
  const Script sc = make_script(infokv_test::test_seed());
  // ubatch 16: entries at chunk multiples (prefill is cut-invariant from ubatch 32 only); 64, where the backend makes
  // prefill cut-invariant: entries at the prompts' ends, the rest cut from the hit.
  for (const int32_t ub : {16, 64}) {
    SCOPED_TRACE("ubatch " + std::to_string(ub));
    auto with_cache = [ub](EngineOptions o) {
      o.session.ubatch = ub;
      o.prefix_cache = true;
      o.prefix.memory_bytes = int64_t{64} << 20;
      o.prefix.min_tokens = 16;
      return o;
    };
    EngineOptions plain = options(Strategy::automatic, kLargePool, false);
    plain.session.ubatch = ub;
    if (ub > 16 && Engine(infokv_test::stories_model(), plain).session().cut_invariant_from() == 0) continue;
    const Outcome ref = run(plain, sc);
    for (Strategy st : {Strategy::recompute, Strategy::automatic}) {
      const Outcome rc = run(with_cache(options(st, kSmallPool, false)), sc);
      bool estimated = false;
      for (const Decision &d : rc.decisions)
        if (d.why.find("tokens from the prefix cache") != std::string::npos) estimated = true;
      EXPECT_TRUE(estimated) << "no decision counted a cached prefix (" << strategy_name(st) << ")";
      if (st == Strategy::automatic) continue;
      EXPECT_GT(rc.stats.recomputes, 0);
      EXPECT_GT(rc.stats.recompute_hit_tokens, 0);
      bool noted = false;
      for (const Decision &d : rc.decisions)
        if (d.why.find("came back from the prefix cache") != std::string::npos) noted = true;
      EXPECT_TRUE(noted);
      expect_same_answers(rc, ref);
    }
  }
}

TEST(Engine, FailStrategyFailsWhatDoesNotFitAndTheRestCompletes) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome f = run(options(Strategy::fail, kSmallPool, false), sc);
  int failed = 0, done = 0;
  for (TurnState s : f.final_state) (s == TurnState::failed ? failed : done) += s == TurnState::failed || s == TurnState::done;
  EXPECT_GT(failed, 0);
  EXPECT_GT(done, 0);
  EXPECT_EQ(f.stats.moves + f.stats.recomputes + f.stats.compressions, 0);
}

TEST(Engine, AutoCompletesEveryConversationAndReportsEachDecision) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome a = run(options(Strategy::automatic, kSmallPool, true), sc);
  for (TurnState s : a.final_state) EXPECT_EQ(s, TurnState::done);
  for (const auto &g : a.generated) EXPECT_EQ(g.size(), 2u * kGen);
  ASSERT_FALSE(a.decisions.empty());
  for (const Decision &d : a.decisions) {
    EXPECT_NE(d.action, Action::fail);
    EXPECT_FALSE(d.why.empty());
  }
  EXPECT_EQ(a.stats.failures, 0);
}

TEST(Engine, RecomputedCompressedConversationKeepsTheSameKeptSet) {
  // A compressed conversation dropped for a higher-priority one comes back with exactly the positions it kept,
  // prefilled again or from a cached prefix of its tokens cut back to them.
  for (const bool cache : {false, true}) {
    SCOPED_TRACE(cache ? "from the prefix cache" : "prefilled");
    EngineOptions o = options(Strategy::recompute, 60, true);
    if (cache) {
      o.session.ubatch = 16;
      o.prefix_cache = true;
      o.prefix.memory_bytes = int64_t{64} << 20;
      o.prefix.min_tokens = 16;
    }
    Engine e(infokv_test::stories_model(), o);
    std::mt19937 rng(infokv_test::test_seed());
    std::vector<int32_t> p{1}, q{1};
    for (int j = 0; j < 100; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    for (int j = 0; j < 150; ++j) q.push_back(3 + static_cast<int32_t>(rng() % 500));
    const int64_t a = e.open(0);
    e.submit(a, {p, 4, {}, {}});
    while (e.busy()) e.step();
    const int32_t seq = e.sequence(a);
    ASSERT_GE(seq, 0);
    e.session().compressor().compress(seq, 40);
    std::vector<std::vector<int32_t>> kept;
    size_t kept_all = 0;
    for (const LayerSlots &L : e.session().kv().seq(seq).layers) {
      kept.push_back(L.pos);
      kept_all += L.pos.size();
    }
    // Compressed: a requested auto compression spreads the budget over the layers by the context replay, so some
    // layers may keep all they held, never all of them.
    ASSERT_LT(kept_all, kept.size() * static_cast<size_t>(e.session().kv().seq(seq).length));
    EXPECT_EQ(drop_and_bring_back(e, a, q, e.tokens(a).size()), kept);
    EXPECT_GE(e.stats().recomputes, 1);  // b, idle by then, may be dropped to bring a back
    if (cache) {
      EXPECT_GT(e.stats().recompute_hit_tokens, 0);
    }
    e.session().kv().check_invariants();
  }
}

// A conversation whose layers auto holds partly at q8_0 (SmolLM2, heads of 64) comes back from a recompute with the
// same positions in the same dtype in every layer (recomputed in f16, then rounded as the compression rounded them),
// so it takes the blocks it held before, not twice as many.
TEST(Engine, RecomputedConversationKeepsItsLayersPrecision) {
  REQUIRE_SMOLLM2(m);
  EngineOptions o = options(Strategy::recompute, 12 * m->hparams().n_layer, true);
  o.session.kv_dtype = KvDtype::f16;
  Engine e(m, o);
  const std::vector<int32_t> text = m->tokenizer().encode(
      infokv_test::read_text(infokv_test::corpora_dir() + "/emma.txt").substr(250000, 3000), true);
  ASSERT_GE(text.size(), 260u);
  const std::vector<int32_t> p(text.begin(), text.begin() + 100), q(text.begin() + 100, text.begin() + 250);
  const int64_t a = e.open(0);
  e.submit(a, {p, 4, {}, {}});
  while (e.busy()) e.step();
  const int32_t seq = e.sequence(a);
  ASSERT_GE(seq, 0);
  e.session().compressor().compress(seq, 40, Question::next);
  std::vector<std::vector<int32_t>> kept;
  std::vector<KvDtype> dtype;
  for (const LayerSlots &L : e.session().kv().seq(seq).layers) {
    kept.push_back(L.pos);
    dtype.push_back(L.dtype);
  }
  ASSERT_NE(std::count(dtype.begin(), dtype.end(), KvDtype::q8_0), 0) << "auto held no layer at q8_0";
  const int64_t blocks = e.session().info(seq).blocks;
  EXPECT_EQ(drop_and_bring_back(e, a, q, e.tokens(a).size()), kept);
  ASSERT_GE(e.sequence(a), 0);
  const SeqCache &sc = e.session().kv().seq(e.sequence(a));
  for (size_t l = 0; l < dtype.size(); ++l) EXPECT_EQ(sc.layers[l].dtype, dtype[l]) << "layer " << l;
  EXPECT_LE(e.session().info(e.sequence(a)).blocks, blocks + m->hparams().n_layer);  // + the new tokens' blocks
  EXPECT_GE(e.stats().recomputes, 1);
  e.session().kv().check_invariants();
}

TEST(Engine, RecomputedConversationKeepsItsPolicyEvidence) {
  // A conversation dropped for a recompute comes back with what the policy knew of it: each kept token's slot
  // channels and the compressor's state, as in a run where it was never preempted (a moved one has them from its
  // snapshot). Without them its next compression would rank tokens on the recompute's evidence alone.
  std::mt19937 rng(infokv_test::test_seed());
  std::vector<int32_t> p{1}, q{1};
  for (int j = 0; j < 100; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
  for (int j = 0; j < 150; ++j) q.push_back(3 + static_cast<int32_t>(rng() % 500));
  struct Seen {
    std::vector<LayerSlots> layers;
    SeqCompression compression;
  };
  auto run = [&](bool preempt) {
    Engine e(infokv_test::stories_model(), options(Strategy::recompute, 60, true));
    const int64_t a = e.open(0);
    e.submit(a, {p, 4, {}, {}});
    while (e.busy()) e.step();
    const int32_t seq = e.sequence(a);
    EXPECT_GE(seq, 0);
    e.session().compressor().compress(seq, 40);
    if (preempt) {
      const int64_t b = e.open(1);
      e.submit(b, {q, 10, {}, {}});
      while (e.busy()) e.step();
      EXPECT_EQ(e.state(b), TurnState::done);
      EXPECT_EQ(e.where(a), Where::dropped);
    }
    e.submit(a, {{5, 6, 7}, 0, {}, {}});
    while (e.busy()) e.step();
    EXPECT_EQ(e.state(a), TurnState::done) << e.failure(a);
    Seen s;
    s.layers = e.session().kv().seq(e.sequence(a)).layers;
    s.compression = e.session().compressor().state(e.sequence(a));
    return s;
  };
  const Seen never = run(false), dropped = run(true);
  ASSERT_EQ(dropped.compression.n_compressions, never.compression.n_compressions);
  ASSERT_EQ(dropped.compression.since_compress, never.compression.since_compress);
  ASSERT_EQ(dropped.layers.size(), never.layers.size());
  for (size_t l = 0; l < never.layers.size(); ++l) {
    ASSERT_EQ(dropped.layers[l].pos, never.layers[l].pos) << "layer " << l;
    for (int c = 0; c < kSlotChannels; ++c) {
      const std::vector<float> &x = never.layers[l].channels[static_cast<size_t>(c)];
      const std::vector<float> &y = dropped.layers[l].channels[static_cast<size_t>(c)];
      ASSERT_EQ(x.size(), y.size());
      // the same evidence, up to the last bits of the attention the new turn added over recomputed K/V
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(y[i], x[i], 1e-4 + 1e-3 * std::fabs(x[i])) << "layer " << l << " channel " << c << " slot " << i;
    }
  }
}

TEST(Engine, DamagedSpillFileIsRecomputedNotTrusted) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome ref = run(options(Strategy::automatic, kLargePool, false), sc);
  const std::string dir = (std::filesystem::temp_directory_path() / ("infokv-spill-test-" + std::to_string(infokv_test::test_seed()))).string();
  std::filesystem::remove_all(dir);
  EngineOptions o = options(Strategy::move, kSmallPool, false);
  o.spill_dir = dir;
  int flipped = 0;
  const Outcome mv = run(o, sc, nullptr, [&](Engine &, int64_t) {
    for (const auto &f : std::filesystem::recursive_directory_iterator(dir)) {
      // the spill files in the engine's own directory inside `dir` (not the directory's lock)
      if (!f.is_regular_file() || f.path().filename() == ".lock") continue;
      std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(static_cast<std::streamoff>(std::filesystem::file_size(f.path()) / 2));
      const char x = 0x5a;
      io.write(&x, 1);
      ++flipped;
    }
  });
  std::filesystem::remove_all(dir);
  ASSERT_GT(flipped, 0);
  bool refused = false;
  for (const Decision &d : mv.decisions)
    if (d.action == Action::recompute && d.why.find("could not be read back") != std::string::npos) refused = true;
  EXPECT_TRUE(refused);
  for (int i = 0; i < kConversations; ++i) {
    EXPECT_EQ(mv.final_state[static_cast<size_t>(i)], TurnState::done);
    EXPECT_EQ(mv.generated[static_cast<size_t>(i)], ref.generated[static_cast<size_t>(i)]) << "conversation " << i;
  }
}

TEST(Engine, BadCallsAreRefusedAndChangeNothing) {
  Engine e(infokv_test::stories_model(), options(Strategy::automatic, kLargePool, false));
  const int64_t c = e.open();
  const int32_t vocab = e.session().model().hparams().n_vocab;
  auto status_of = [](const std::function<void()> &f) {
    try {
      f();
    } catch (const Error &err) {
      return err.status();
    }
    return Status::ok;
  };
  EXPECT_EQ(status_of([&] { e.submit(c, {{1, vocab}, 4, {}, {}}); }), Status::out_of_range);
  EXPECT_EQ(status_of([&] { e.submit(c, {{1, -1}, 4, {}, {}}); }), Status::out_of_range);
  EXPECT_EQ(status_of([&] { e.submit(c, {{}, 4, {}, {}}); }), Status::invalid_argument);
  EXPECT_EQ(status_of([&] { e.submit(c, {{1, 5}, -1, {}, {}}); }), Status::invalid_argument);
  EXPECT_EQ(status_of([&] { e.submit(c + 100, {{1, 5}, 4, {}, {}}); }), Status::not_found);
  EXPECT_FALSE(e.busy());
  e.submit(c, {{1, 5, 6}, 4, {}, {}});
  EXPECT_EQ(status_of([&] { e.submit(c, {{7}, 4, {}, {}}); }), Status::bad_state);
  while (e.busy()) e.step();
  EXPECT_EQ(e.generated(c).size(), 4u);
  EXPECT_EQ(e.tokens(c).size(), 7u);
  EXPECT_EQ(status_of([&] { e.open(0, 10); }), Status::bad_config);  // a limit needs a policy
  EngineOptions bad = options(Strategy::automatic, kLargePool, false);
  bad.min_keep = 0;
  EXPECT_EQ(status_of([&] { Engine x(infokv_test::stories_model(), bad); }), Status::invalid_argument);
  EXPECT_EQ(status_of([] { parse_strategy("sometimes"); }), Status::invalid_argument);
  e.close(c);
  EXPECT_EQ(status_of([&] { e.state(c); }), Status::not_found);
  EXPECT_EQ(e.session().kv().stats().blocks_used, 0);
}

TEST(Engine, HigherPriorityPreemptsARunningTurn) {
  // A pool for one conversation: the high-priority one arriving second runs first; the low one resumes after.
  Engine e(infokv_test::stories_model(), options(Strategy::move, 40, false));
  std::mt19937 rng(infokv_test::test_seed());
  std::vector<int32_t> p{1};
  for (int j = 0; j < 60; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
  const int64_t low = e.open(0), high = e.open(5);
  e.submit(low, {p, 30, {}, {}});
  e.step();
  e.step();
  e.submit(high, {p, 30, {}, {}});
  int64_t high_done = -1, low_done = -1;
  for (int64_t step = 0; step < 500 && e.busy(); ++step) {
    e.step();
    if (high_done < 0 && e.state(high) == TurnState::done) high_done = step;
    if (low_done < 0 && e.state(low) == TurnState::done) low_done = step;
  }
  ASSERT_GE(high_done, 0);
  ASSERT_GE(low_done, 0);
  EXPECT_LT(high_done, low_done);
  EXPECT_EQ(e.generated(low), e.generated(high)) << "the same prompt, greedy: preemption changed nothing";
}

TEST(Engine, MemoryLimitCompressesTheConversation) {
  Engine e(infokv_test::stories_model(), options(Strategy::automatic, kLargePool, true));
  std::mt19937 rng(infokv_test::test_seed());
  std::vector<int32_t> p{1};
  for (int j = 0; j < 100; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
  const int64_t c = e.open(0, 48);
  e.submit(c, {p, 30, {}, {}});
  while (e.busy()) e.step();
  const double kept = e.session().compressor().mean_kept(e.sequence(c));
  EXPECT_LE(kept, 48 + e.session().compressor().slack_for(48));
  bool reported = false;
  for (const Decision &d : e.decisions())
    if (d.action == Action::compress && d.why.find("memory limit") != std::string::npos) reported = true;
  EXPECT_TRUE(reported);
}

}  // namespace

namespace {

TEST(Engine, AConversationTooLargeForThePoolAloneFailsInsteadOfLooping) {
  // 10 blocks = 2 per layer = 32 tokens: a 20-token prompt cannot grow by 40.
  std::mt19937 rng(infokv_test::test_seed());
  std::vector<int32_t> p{1};
  for (int j = 0; j < 19; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
  for (Strategy st : {Strategy::move, Strategy::recompute, Strategy::fail}) {
    Engine e(infokv_test::stories_model(), options(st, 10, false));
    const int64_t c = e.open();
    e.submit(c, {p, 40, {}, {}});
    int64_t steps = 0;
    while (e.busy() && steps < 200) {
      e.step();
      ++steps;
    }
    EXPECT_LT(steps, 200) << strategy_name(st) << ": stuck";
    EXPECT_EQ(e.state(c), TurnState::failed) << strategy_name(st);
    EXPECT_NE(e.failure(c).find("KV pool full"), std::string::npos) << e.failure(c);
    EXPECT_LT(e.stats().moves + e.stats().recomputes, 3) << strategy_name(st) << ": it went round in circles";
  }
  // With a policy, auto compresses the conversation itself and goes on.
  Engine e(infokv_test::stories_model(), options(Strategy::automatic, 10, true));
  const int64_t c = e.open();
  e.submit(c, {p, 40, {}, {}});
  for (int i = 0; i < 200 && e.busy(); ++i) e.step();
  EXPECT_EQ(e.state(c), TurnState::done) << e.failure(c);
  EXPECT_EQ(e.generated(c).size(), 40u);
  EXPECT_GT(e.stats().compressions, 0);
}

TEST(Engine, RecomputeWorksUnderAQualityTarget) {
  // policy auto with max_loss and no budget: recomputing with compression off must not trip the config's checks.
  const Script sc = make_script(infokv_test::test_seed());
  EngineOptions o = options(Strategy::recompute, kSmallPool, false);
  o.session.compression.policy = PolicyKind::auto_;
  o.session.compression.max_loss = 0.5;
  const Outcome r = run(o, sc);
  EXPECT_GT(r.stats.recomputes, 0);
  for (TurnState s : r.final_state) EXPECT_EQ(s, TurnState::done);
}

TEST(Engine, AbsurdMemoryLimitsAreRefused) {
  Engine e(infokv_test::stories_model(), options(Strategy::automatic, kLargePool, true));
  EXPECT_THROW(e.open(0, int64_t{1} << 40), Error);
  EXPECT_THROW(e.open(0, -5), Error);
  EXPECT_GT(e.open(0, 1 << 20), 0);
}

// Turns submitted at given steps, each in a conversation of its own: per turn, its tokens, their logits, the steps
// that gave it a token (the first of them its first token's).
struct Arrival {
  int64_t step;
  std::vector<int32_t> prompt;
  int32_t max_tokens;
};
struct Served {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int64_t>> token_steps;
  int64_t first_step(size_t i) const { return token_steps[i].empty() ? -1 : token_steps[i].front(); }
  bool got_token_at(size_t i, int64_t step) const {
    return std::find(token_steps[i].begin(), token_steps[i].end(), step) != token_steps[i].end();
  }
};

Served serve_arrivals(const EngineOptions &o, const std::vector<Arrival> &arrivals) {
  Engine e(infokv_test::stories_model(), o);
  Served r;
  std::map<int64_t, size_t> index;
  r.tokens.resize(arrivals.size());
  r.logits.resize(arrivals.size());
  r.token_steps.resize(arrivals.size());
  for (int64_t step = 0; step <= 300; ++step) {
    bool more = false;
    for (size_t i = 0; i < arrivals.size(); ++i) {
      if (arrivals[i].step == step) {
        const int64_t id = e.open();
        index[id] = i;
        e.submit(id, Turn{arrivals[i].prompt, arrivals[i].max_tokens, {}, {}});
      }
      more = more || arrivals[i].step > step;
    }
    if (!more && !e.busy()) break;
    for (const TokenEvent &ev : e.step()) {
      const size_t i = index.at(ev.conversation);
      r.token_steps[i].push_back(step);
      r.tokens[i].push_back(ev.token);
      r.logits[i].insert(r.logits[i].end(), ev.logits->begin(), ev.logits->end());
    }
  }
  return r;
}

TEST(Engine, ALongPromptGoesInAChunkPerStepWhileTheOthersKeepDecodingWithTheSameAnswers) {
  std::mt19937 rng(infokv_test::test_seed());
  std::vector<int32_t> pa{1}, pb{1};
  for (int i = 0; i < 9; ++i) pa.push_back(3 + static_cast<int32_t>(rng() % 500));
  for (int i = 0; i < 149; ++i) pb.push_back(3 + static_cast<int32_t>(rng() % 500));
  // No policy; auto compressing only when memory runs out (infokv serve); SnapKV at half, which compresses B's
  // prompt once at its end (and every prompt chunk would give it other evidence).
  for (int policy : {0, 1, 2}) {
    EngineOptions o = options(Strategy::automatic, kLargePool, policy > 0);
    if (policy == 2) {
      o.session.compression.policy = PolicyKind::snapkv;
      o.session.compression.budget_fraction = 0.5;
    }
    o.session.ubatch = 16;  // the default prefill per step: one chunk of 16
    // A decoding from step 0; B's long prompt arriving at step 1.
    const Served both = serve_arrivals(o, {{0, pa, 30}, {1, pb, 8}});
    // B's 150 tokens go in 16 per step over ten steps (its first token comes with the tenth), and A, already
    // decoding, gets a token in every one of them.
    const int64_t first_b = both.first_step(1);
    EXPECT_EQ(first_b, 1 + 9) << "policy " << policy;
    for (int64_t step = 0; step <= first_b; ++step) EXPECT_TRUE(both.got_token_at(0, step)) << "step " << step;
    // The same answers, bit for bit, as each alone with its prompt prefilled whole.
    EngineOptions whole = o;
    whole.max_prefill_tokens = 0;
    const Served a_alone = serve_arrivals(whole, {{0, pa, 30}}), b_alone = serve_arrivals(whole, {{1, pb, 8}});
    EXPECT_EQ(both.tokens[0], a_alone.tokens[0]) << "policy " << policy;
    EXPECT_EQ(both.logits[0], a_alone.logits[0]) << "policy " << policy;
    EXPECT_EQ(both.tokens[1], b_alone.tokens[0]) << "policy " << policy;
    EXPECT_EQ(both.logits[1], b_alone.logits[0]) << "policy " << policy;
    EXPECT_EQ(both.tokens[1].size(), 8u);
  }
}

TEST(Engine, AShortTurnArrivingBehindALongPromptGoesAheadOfItsRemainingChunks) {
  std::mt19937 rng(infokv_test::test_seed());
  auto prompt = [&](int n) {
    std::vector<int32_t> p{1};
    for (int i = 1; i < n; ++i) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    return p;
  };
  const std::vector<int32_t> pa = prompt(10), pb = prompt(160), pc = prompt(12), pd = prompt(12);
  EngineOptions o = options(Strategy::automatic, kLargePool, true);
  o.session.ubatch = 16;
  // A decodes; B's 160 tokens arrive at step 1 (ten chunks); C and D, short, at steps 3 and 4.
  const Served got = serve_arrivals(o, {{0, pa, 40}, {1, pb, 6}, {3, pc, 6}, {4, pd, 6}});
  // C and D start within two steps of arriving (not after B's remaining chunks), B is delayed by the steps they
  // took (at most every other step), and every answer is the one it gets alone.
  EXPECT_LE(got.first_step(2), 3 + 1);
  EXPECT_LE(got.first_step(3), 4 + 2);
  EXPECT_GE(got.first_step(1), 1 + 9);
  EXPECT_LE(got.first_step(1), 1 + 9 + 2);
  for (size_t i = 0; i < 4; ++i) {
    const Served alone = serve_arrivals(o, {{0, std::vector<std::vector<int32_t>>{pa, pb, pc, pd}[i], i == 0 ? 40 : 6}});
    EXPECT_EQ(got.tokens[i], alone.tokens[0]) << "turn " << i;
  }
  // First come, first served without a limit: C waits for nothing and B goes in whole at once.
  EngineOptions whole = o;
  whole.max_prefill_tokens = 0;
  const Served unlimited = serve_arrivals(whole, {{0, pa, 40}, {1, pb, 6}, {3, pc, 6}});
  EXPECT_EQ(unlimited.first_step(1), 1);
  EXPECT_EQ(unlimited.first_step(2), 3);
}

TEST(Engine, APrefillLimitStartsTurnsAStepApartWithTheSameAnswers) {
  const Script sc = make_script(infokv_test::test_seed());
  const Outcome ref = run(options(Strategy::automatic, kLargePool, false), sc);
  // One prompt per step (each is 41 tokens, over the limit of 1): the five turns submitted together start one step
  // apart, in order of arrival, while the ones already in keep decoding.
  EngineOptions o = options(Strategy::automatic, kLargePool, false);
  o.max_prefill_tokens = 1;
  std::vector<int64_t> running_after;
  const Outcome lim = run(o, sc, nullptr, [&](Engine &e, int64_t step) {
    if (step >= kConversations) return;
    int64_t r = 0;
    for (int64_t id = 1; id <= kConversations; ++id) r += e.state(id) == TurnState::running;
    running_after.push_back(r);
  });
  EXPECT_EQ(running_after, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  for (int i = 0; i < kConversations; ++i) {
    EXPECT_EQ(lim.final_state[static_cast<size_t>(i)], TurnState::done);
    EXPECT_EQ(lim.generated[static_cast<size_t>(i)], ref.generated[static_cast<size_t>(i)]) << "conversation " << i;
    EXPECT_EQ(lim.logits[static_cast<size_t>(i)], ref.logits[static_cast<size_t>(i)]) << "conversation " << i;
  }
  EXPECT_EQ(lim.stats.prefilled_tokens, ref.stats.prefilled_tokens);
  // The same with a compression policy on (as infokv serve runs: auto, compressing only when memory runs out): its
  // channels see the same tokens in the same chunks, so nothing changes either.
  EngineOptions op = options(Strategy::automatic, kLargePool, true);
  const Outcome ref_p = run(op, sc);
  op.max_prefill_tokens = 1;
  const Outcome lim_p = run(op, sc);
  for (int i = 0; i < kConversations; ++i) {
    EXPECT_EQ(lim_p.generated[static_cast<size_t>(i)], ref_p.generated[static_cast<size_t>(i)]) << "conversation " << i;
    EXPECT_EQ(lim_p.logits[static_cast<size_t>(i)], ref_p.logits[static_cast<size_t>(i)]) << "conversation " << i;
  }
  // With a pool that holds two and a half of them, the limit and the strategy's choices together still finish all.
  EngineOptions small = options(Strategy::automatic, kSmallPool, false);
  small.max_prefill_tokens = 1;
  const Outcome tight = run(small, sc);
  for (int i = 0; i < kConversations; ++i) {
    EXPECT_EQ(tight.final_state[static_cast<size_t>(i)], TurnState::done);
    EXPECT_EQ(tight.generated[static_cast<size_t>(i)], ref.generated[static_cast<size_t>(i)]) << "conversation " << i;
  }
  EngineOptions bad = options(Strategy::automatic, kLargePool, false);
  bad.max_prefill_tokens = -2;
  EXPECT_THROW(Engine(infokv_test::stories_model(), bad), Error);
}

}  // namespace
