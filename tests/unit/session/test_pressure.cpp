// Memory pressure decided like an allocator: a step that does not fit compresses only the sequences it needs,
// cheapest estimated loss per freed block first, and only when the step then fits; a refused step changes no
// sequence. Generation that runs into a full pool keeps and reports what it decoded, and no more.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "compress/policy_table.hpp"
#include "support/kv.hpp"
#include "model/model.hpp"
#include "support/random_inputs.hpp"
#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "session/session.hpp"
#include "support/paths.hpp"
#include "util/error.hpp"
#include "support/stories_model.hpp"

using namespace infokv;

namespace {

constexpr auto stories = infokv_test::stories_model;

std::vector<int32_t> random_tokens(std::mt19937 &rng, size_t n) {
  std::vector<int32_t> t{1};
  for (size_t i = 1; i < n; ++i) t.push_back(3 + static_cast<int32_t>(rng() % 500));
  return t;
}

void decode_all(Session &s, int32_t id, const std::vector<int32_t> &toks) {
  std::vector<BatchToken> b;
  for (int32_t t : toks) b.push_back({id, t, false});
  s.decode(b);
}

// Everything observable about a sequence that a failed step must leave alone.
struct SeqPicture {
  SeqInfo info;
  std::vector<std::vector<int32_t>> pos;
  std::vector<float> logits;
  int64_t compressions = 0;
  std::vector<int32_t> tokens;
  bool operator==(const SeqPicture &o) const {
    return info.length == o.info.length && info.kept_per_layer == o.info.kept_per_layer && info.blocks == o.info.blocks &&
           pos == o.pos && logits == o.logits && compressions == o.compressions && tokens == o.tokens;
  }
};

SeqPicture picture(const Session &s, int32_t id) {
  SeqPicture p;
  p.info = s.info(id);
  for (const LayerSlots &L : s.kv().seq(id).layers) p.pos.push_back(L.pos);
  if (s.has_logits(id)) p.logits = s.logits(id);
  p.compressions = s.compressor().compressions(id);
  p.tokens = s.tokens(id);
  return p;
}

// One thread, blocks of 16 tokens, a pool of pool_blocks blocks (all layers together), no compression.
SessionOptions pool_options(int64_t pool_blocks) {
  SessionOptions o;
  o.n_threads = 1;
  o.block_size = 16;
  o.kv_pool_blocks = pool_blocks;
  return o;
}

SessionOptions pressure_options(int64_t pool_blocks) {
  SessionOptions o = pool_options(pool_blocks);
  o.kv_dtype = KvDtype::f32;
  o.compression.policy = PolicyKind::snapkv;
  o.compression.budget_tokens = 32;
  o.compression.interval = 1 << 20;
  o.compression.compress_after_prefill = false;  // sequences stay over budget until pressure
  return o;
}

}  // namespace

// The outside probe's case: a 100-block pool, sequence 0 holding 200 tokens (over its 32-token budget), and 1,000
// tokens for sequence 1. Compressing sequence 0 cannot make room, so the step fails and sequence 0 is untouched
// (before the fix it was compressed 200 -> 32 and then the call failed).
TEST(Pressure, RefusedStepLeavesEverySequenceUnchanged) {
  std::mt19937 rng(infokv_test::test_seed());
  Session s(stories(), pressure_options(100));
  const int32_t s0 = s.add_sequence(), s1 = s.add_sequence();
  decode_all(s, s0, random_tokens(rng, 200));
  const SeqPicture p0 = picture(s, s0), p1 = picture(s, s1);
  const int64_t used = s.kv().stats().blocks_used;
  try {
    decode_all(s, s1, random_tokens(rng, 1000));
    FAIL() << "expected KV full";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::kv_full);
    EXPECT_NE(std::string(e.what()).find("nothing was compressed"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(picture(s, s0) == p0) << "a refused step compressed another sequence";
  EXPECT_TRUE(picture(s, s1) == p1);
  EXPECT_EQ(s.kv().stats().blocks_used, used);
  s.kv().check_invariants();
}

// Periodic compression runs after a step has been committed. For a sequence sharing blocks with a fork it needs
// fresh blocks for the copies; when the pool had none, the compaction's KV full escaped as the step's status while
// the token stayed decoded (decode reported failure, length +1). Now such a step succeeds and the sequence stays
// over budget until there is room. Filler sizes sweep the free-block count through the interesting range.
TEST(Pressure, PeriodicCompressionWithoutRoomDoesNotFailACommittedStep) {
  const int32_t n_layer = stories()->hparams().n_layer;
  int over_budget_after_ok = 0;
  for (int filler = 1; filler <= 200; filler += 3) {
    SessionOptions o = pressure_options(int64_t{12} * n_layer);
    o.compression.budget_tokens = 30;
    o.compression.interval = 1;  // compress after every decoding step
    Session s(stories(), o);
    std::mt19937 rng(static_cast<unsigned>(filler));
    const int32_t s0 = s.add_sequence();
    decode_all(s, s0, random_tokens(rng, 40));
    const int32_t f = s.fork_sequence(s0);
    const int32_t g = s.add_sequence();
    try {
      decode_all(s, g, random_tokens(rng, static_cast<size_t>(filler)));
    } catch (const Error &) {
      continue;  // the filler itself did not fit
    }
    for (int step = 0; step < 8; ++step) {
      const int32_t seq = step % 2 == 0 ? s0 : f;
      const SeqPicture before = picture(s, seq);
      try {
        decode_all(s, seq, {static_cast<int32_t>(300 + step)});
      } catch (const Error &e) {
        EXPECT_EQ(e.status(), Status::kv_full) << e.what();
        EXPECT_TRUE(picture(s, seq) == before) << "filler " << filler << " step " << step << ": a failed step changed "
                                               << "the sequence (" << e.what() << ")";
        continue;
      }
      const SeqInfo info = s.info(seq);
      EXPECT_EQ(info.length, before.info.length + 1);
      if (*std::max_element(info.kept_per_layer.begin(), info.kept_per_layer.end()) > 30) ++over_budget_after_ok;
    }
    s.kv().check_invariants();
  }
  EXPECT_GT(over_budget_after_ok, 0) << "no filler size left the pool too short for the compaction: test not exercised";
}

// Three sequences over budget, a fourth step that needs a few blocks: only as many sequences are compressed as the
// step needs, the cheapest first by the estimate the session reports, and the step then succeeds.
TEST(Pressure, CompressesOnlyWhatTheStepNeedsCheapestFirst) {
  std::mt19937 rng(infokv_test::test_seed());
  const int32_t n_layer = stories()->hparams().n_layer;
  // 3 x 96 tokens = 3 x 6 blocks per layer; room for 2 more blocks per layer.
  Session s(stories(), pressure_options(int64_t{n_layer} * (3 * 6 + 2)));
  std::vector<int32_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(s.add_sequence());
    decode_all(s, ids.back(), random_tokens(rng, 96));
  }
  const int32_t fresh = s.add_sequence();
  std::map<int32_t, SeqPicture> before;
  for (int32_t id : ids) before[id] = picture(s, id);
  // 48 tokens need 3 blocks per layer: one more than is free, so one compression (96 -> 32 frees 4) is enough.
  const std::vector<int32_t> step = random_tokens(rng, 48);
  const std::vector<PressureCandidate> cands = s.compressor().pressure_candidates({{fresh, 48}});
  ASSERT_EQ(cands.size(), 3u);
  for (size_t i = 1; i < cands.size(); ++i) EXPECT_LE(cands[i - 1].cost_per_block, cands[i].cost_per_block);
  for (const auto &c : cands) {
    EXPECT_EQ(c.blocks, int64_t{n_layer} * 4) << "96 -> 32 tokens frees 4 of 6 blocks per layer";
    EXPECT_GT(c.plan.evicted_share, 0.0);
    EXPECT_LT(c.plan.evicted_share, 1.0);
  }
  decode_all(s, fresh, step);
  int compressed = 0;
  for (int32_t id : ids) {
    if (id == cands[0].seq) {
      EXPECT_EQ(s.compressor().compressions(id), 1);
      EXPECT_EQ(s.info(id).kept_per_layer, std::vector<int32_t>(static_cast<size_t>(n_layer), 32));
      ++compressed;
    } else {
      EXPECT_TRUE(picture(s, id) == before[id]) << "sequence " << id << " was compressed without need";
    }
  }
  EXPECT_EQ(compressed, 1);
  EXPECT_EQ(s.info(fresh).length, 48);
  s.kv().check_invariants();
}

// The estimates the allocator decides with are exact for a single compaction, forks (shared blocks) included.
TEST(Pressure, FreedBlockEstimatesMatchCompaction) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int round = 0; round < 40; ++round) {
    KvCache kv(infokv_test::kv_config(3, 1, 4, 4, 200));
    kv.add(0);
    const int32_t n = 5 + static_cast<int32_t>(rng() % 40);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
    kv.append_slots(0, pos.data(), n);
    if (rng() % 2) kv.fork(0, 1);  // every block shared
    std::vector<std::vector<int32_t>> keep(3);
    for (auto &k : keep)
      for (int32_t j = 0; j < n; ++j)
        if (rng() % 3 != 0) k.push_back(j);
    const int32_t count = static_cast<int32_t>(rng() % 9);
    const int64_t freed = kv.blocks_freed_by(0, keep);
    const int64_t need_after = kv.blocks_needed_after(0, keep, count);
    const int64_t free0 = kv.free_blocks();
    kv.compact(0, keep);
    EXPECT_EQ(kv.free_blocks() - free0, freed) << "round " << round;
    EXPECT_EQ(kv.blocks_needed({0}, {count}), need_after) << "round " << round;
    kv.check_invariants();
  }
}

// Generating 400 tokens into a pool of 160 per layer (no policy): the call stops at KV full, reports the tokens it
// decoded (they are in the sequence), and its sampler has accepted exactly those and drawn no more, so it matches a
// run asked for exactly that many tokens.
TEST(Pressure, GenerateIntoAFullPoolKeepsAndReportsWhatItDecoded) {
  const int32_t n_layer = stories()->hparams().n_layer;
  const SessionOptions o = pool_options(int64_t{n_layer} * 10);
  const std::vector<int32_t> prompt = stories()->tokenizer().encode("Once upon a time", true);
  // A sampled story may end (EOS) before the pool fills: take the first seed whose run reaches the end of the pool.
  SamplerParams sp;
  sp.temperature = 1.0f;
  std::unique_ptr<Session> sess;
  std::unique_ptr<Sampler> sampler;
  GenerateResult r;
  const uint32_t base = infokv_test::test_seed();
  for (uint32_t k = 0; k < 50 && (!sess || r.stopped_by_eos); ++k) {
    sp.seed = base + k;
    sess = std::make_unique<Session>(stories(), o);
    sampler = std::make_unique<Sampler>(sp);
    r = generate(*sess, sess->add_sequence(), prompt, 400, *sampler, nullptr);
  }
  ASSERT_FALSE(r.stopped_by_eos) << "50 seeds all ended their story before 160 tokens";
  Session &s = *sess;
  Sampler &smp = *sampler;
  const int32_t id = 0;
  EXPECT_EQ(r.error, Status::kv_full);
  EXPECT_FALSE(r.tokens.empty());
  EXPECT_EQ(static_cast<int64_t>(prompt.size() + r.tokens.size()), s.info(id).length);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  EXPECT_EQ(s.tokens(id), all);

  // The same run asked for exactly that many tokens in a large pool.
  SessionOptions big = o;
  big.kv_pool_blocks = 0;
  Session s2(stories(), big);
  const int32_t id2 = s2.add_sequence();
  Sampler smp2(sp);
  GenerateResult r2 = generate(s2, id2, prompt, static_cast<int32_t>(r.tokens.size()), smp2, nullptr);
  EXPECT_EQ(r2.tokens, r.tokens);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(smp.rng().state()[i], smp2.rng().state()[i]) << "the failed draw was not undone";
  EXPECT_EQ(smp.history(), smp2.history());
}

// The batched loop keeps the same promise: a failed step reports what every sequence decoded before it.
TEST(Pressure, GenerateBatchIntoAFullPoolKeepsWhatItDecoded) {
  const int32_t n_layer = stories()->hparams().n_layer;
  const SessionOptions o = pool_options(int64_t{n_layer} * 12);
  Session s(stories(), o);
  const int32_t a = s.add_sequence();
  decode_all(s, a, stories()->tokenizer().encode("Once upon a time", true));
  const int32_t b = s.fork_sequence(a);
  std::vector<Sampler> samplers;
  for (uint64_t seed : {1u, 2u}) {
    SamplerParams sp;
    sp.temperature = 1.0f;
    sp.seed = seed;
    samplers.emplace_back(sp);
  }
  const std::vector<GenerateResult> rs = generate_batch(s, {a, b}, 400, samplers);
  for (size_t i = 0; i < 2; ++i) {
    const int32_t id = i == 0 ? a : b;
    if (rs[i].stopped_by_eos) continue;
    EXPECT_EQ(rs[i].error, Status::kv_full);
    EXPECT_EQ(static_cast<int64_t>(s.tokens(id).size()), s.info(id).length);
    EXPECT_EQ(std::vector<int32_t>(s.tokens(id).end() - static_cast<std::ptrdiff_t>(rs[i].tokens.size()), s.tokens(id).end()),
              rs[i].tokens);
    // The sampler accepted exactly the decoded tokens (its history holds the last repeat_last_n of them).
    const size_t h = samplers[i].history().size();
    ASSERT_LE(h, rs[i].tokens.size());
    EXPECT_TRUE(std::equal(samplers[i].history().begin(), samplers[i].history().end(), rs[i].tokens.end() - static_cast<std::ptrdiff_t>(h)));
  }
  s.kv().check_invariants();
}

// A prompt four times the pool: prefilled in chunks with compression between them, so the full cache never exists.
// Without a policy the same prompt is refused as KV full, changing nothing.
TEST(Prefill, PromptFourTimesThePoolFitsWithCompression) {
  std::mt19937 rng(infokv_test::test_seed());
  const int32_t n_layer = stories()->hparams().n_layer;
  SessionOptions o = pool_options(int64_t{n_layer} * 16);  // 256 tokens per layer
  o.ubatch = 64;
  o.compression.policy = PolicyKind::snapkv;
  o.compression.budget_fraction = 0.125;
  const std::vector<int32_t> prompt = random_tokens(rng, 1024);
  Session s(stories(), o);
  const int32_t id = s.add_sequence();
  s.prefill(id, prompt);
  EXPECT_EQ(s.info(id).length, 1024);
  EXPECT_EQ(s.tokens(id), prompt);
  for (int32_t k : s.info(id).kept_per_layer) EXPECT_LE(k, 128);
  EXPECT_GE(s.compressor().compressions(id), 2);
  EXPECT_TRUE(s.has_logits(id));
  s.decode({{id, 300, false}});  // and generation goes on
  s.kv().check_invariants();

  SessionOptions full = o;
  full.compression = CompressionConfig{};
  Session f(stories(), full);
  const int32_t fid = f.add_sequence();
  EXPECT_THROW(f.prefill(fid, prompt), Error);
  EXPECT_EQ(f.info(fid).length, 0);
  EXPECT_EQ(f.kv().stats().blocks_used, 0);
}

// A chunked prefill that fails part-way (here a token outside the vocabulary in a late chunk, after compressions of
// earlier chunks) leaves the sequence exactly as it was, evictions included, and no other sequence changed.
TEST(Prefill, FailurePartWayLeavesEverySequenceAsItWas) {
  std::mt19937 rng(infokv_test::test_seed());
  const int32_t n_layer = stories()->hparams().n_layer;
  SessionOptions o = pressure_options(int64_t{n_layer} * 20);  // 320 tokens per layer
  o.ubatch = 64;
  o.compression.budget_tokens = 40;
  for (bool start_empty : {true, false}) {
    Session s(stories(), o);
    const int32_t other = s.add_sequence();
    decode_all(s, other, random_tokens(rng, 96));  // over budget: pressure could compress it, but must not
    const int32_t id = s.add_sequence();
    if (!start_empty) decode_all(s, id, random_tokens(rng, 40));
    const SeqPicture p_other = picture(s, other), p_id = picture(s, id);
    const int64_t used = s.kv().stats().blocks_used;
    const std::vector<int32_t> ids_before = s.kv().sequence_ids();
    std::vector<int32_t> prompt = random_tokens(rng, 600);
    prompt[550] = stories()->hparams().n_vocab;  // chunk 9 of 10
    try {
      s.prefill(id, prompt);
      FAIL() << "a token outside the vocabulary was accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::out_of_range);
    }
    EXPECT_TRUE(picture(s, id) == p_id) << "start_empty " << start_empty;
    EXPECT_TRUE(picture(s, other) == p_other);
    EXPECT_EQ(s.kv().stats().blocks_used, used);
    EXPECT_EQ(s.kv().sequence_ids(), ids_before) << "the backup fork was left behind";
    s.kv().check_invariants();
    prompt[550] = 300;  // the same prompt, valid, then goes in (compressing on the way)
    s.prefill(id, prompt);
    EXPECT_GE(s.compressor().compressions(id), 2);
    EXPECT_TRUE(picture(s, other) == p_other);
  }
}
