// Tuning profiles (src/compress/profile.hpp, schemas/profile.fbs): round trip, refusal of damaged bytes and of
// another model's profile, refinement from auto compressions, floors from the profile, what a snapshot records,
// the C ABI, and `infokv tune` / `eval --profile` from the command line.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "compress/policy_table.hpp"
#include "capi/include/infokv/infokv.h"
#include "compress/profile.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "snapshot/snapshot.hpp"
#include "support/paths.hpp"
#include "support/util.hpp"
#include "util/error.hpp"
#include "support/stories_model.hpp"

using namespace infokv;

namespace {

constexpr auto stories = infokv_test::stories_model;

const char *kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high. She asked her mom to help her. Her mom said, "
    "\"Let's get a stick and knock it down.\" They found a long stick and Lily tried to reach the ball. She jumped "
    "and jumped, and finally the ball fell down. Lily was so happy. She thanked her mom and they played together.";

SessionOptions auto_options(int32_t budget) {
  SessionOptions o;
  o.n_threads = 2;
  o.compression.policy = PolicyKind::auto_;
  o.compression.budget_tokens = budget;
  o.compression.compress_after_prefill = false;
  return o;
}

// A session holding the story in sequence 0 (not compressed yet).
int32_t add_story(Session &s) {
  const int32_t id = s.add_sequence();
  std::vector<BatchToken> b;
  for (int32_t t : stories()->tokenizer().encode(kStory, true)) b.push_back({id, t, false});
  s.decode(b);
  return id;
}

std::string temp_path(const std::string &name) {
  return (std::filesystem::temp_directory_path() / ("infokv_profile_" + std::to_string(::getpid()) + "_" + name)).string();
}

TuningProfile sample_profile() {
  TuningProfile p = TuningProfile::empty(stories()->weights_fingerprint(), stories()->tokenizer().fingerprint(), stories()->hparams().n_layer);
  p.tag = "stories";
  p.compressions = 4;
  for (size_t l = 0; l < p.layers.size(); ++l) {
    p.layers[l].share = 0.6 + 0.2 * static_cast<double>(l);
    p.layers[l].evidence[0] = 3;
    p.layers[l].evidence[l % kEvidenceKinds] += 1;
  }
  p.calibration = {{0.01, 0.05}, {0.02, 0.09}};
  p.tuned_file = "emma.txt";
  p.tuned_text_xxh3 = 0x1234;
  p.tuned_begin = 100;
  p.tuned_end = 600;
  return p;
}

void expect_same(const TuningProfile &a, const TuningProfile &b) {
  EXPECT_EQ(a.weights_fingerprint, b.weights_fingerprint);
  EXPECT_EQ(a.tokenizer_fingerprint, b.tokenizer_fingerprint);
  EXPECT_EQ(a.tag, b.tag);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_FLOAT_EQ(static_cast<float>(a.layers[l].share), static_cast<float>(b.layers[l].share));
    EXPECT_EQ(a.layers[l].evidence, b.layers[l].evidence);
  }
  EXPECT_EQ(a.compressions, b.compressions);
  ASSERT_EQ(a.calibration.size(), b.calibration.size());
  for (size_t i = 0; i < a.calibration.size(); ++i) {
    EXPECT_EQ(a.calibration[i].max_loss, b.calibration[i].max_loss);
    EXPECT_EQ(a.calibration[i].kl, b.calibration[i].kl);
  }
  EXPECT_EQ(a.tuned_file, b.tuned_file);
  EXPECT_EQ(a.tuned_text_xxh3, b.tuned_text_xxh3);
  EXPECT_EQ(a.tuned_begin, b.tuned_begin);
  EXPECT_EQ(a.tuned_end, b.tuned_end);
}

using infokv_test::status_of;

}  // namespace

TEST(Profile, RoundTripsThroughBytesAndFiles) {
  const TuningProfile p = sample_profile();
  const std::string b = profile_to_bytes(p);
  expect_same(p, profile_from_bytes(b.data(), b.size()));
  const std::string path = temp_path("rt.ikvp");
  save_profile(p, path);
  expect_same(p, load_profile(path));
  std::filesystem::remove(path);
  EXPECT_EQ(status_of([] { load_profile(temp_path("missing.ikvp")); }), Status::io);
}

TEST(Profile, TruncatedOrCorruptedBytesAreRefusedNeverCrash) {
  const std::string b = profile_to_bytes(sample_profile());
  for (size_t n = 0; n < b.size(); ++n) {
    const Status st = status_of([&] { profile_from_bytes(b.data(), n); });
    EXPECT_EQ(st, Status::bad_config) << "truncated to " << n;
  }
  EXPECT_EQ(status_of([] { profile_from_bytes(nullptr, 0); }), Status::bad_config);
  std::string other = b;
  other[4] = 'X';  // the identifier
  EXPECT_EQ(status_of([&] { profile_from_bytes(other.data(), other.size()); }), Status::bad_config);
  // Every single-byte change and random multi-byte damage: refused with a status, or read as a valid profile.
  std::mt19937 rng(7);
  for (size_t i = 0; i < b.size(); ++i)
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string d = b;
      d[i] = static_cast<char>(static_cast<uint8_t>(d[i]) ^ x);
      try {
        profile_from_bytes(d.data(), d.size()).validate();
      } catch (const Error &e) {
        EXPECT_TRUE(e.status() == Status::bad_config || e.status() == Status::version) << e.what();
      }
    }
  for (int k = 0; k < 2000; ++k) {
    std::string d = b;
    for (int j = 0; j < 4; ++j) d[rng() % d.size()] = static_cast<char>(rng());
    try {
      profile_from_bytes(d.data(), d.size());
    } catch (const Error &) {
    }
  }
}

TEST(Profile, SemanticChecksNameTheField) {
  TuningProfile p = sample_profile();
  p.layers[1].share = std::nan("");
  EXPECT_EQ(status_of([&] { profile_to_bytes(p); }), Status::bad_config);
  p = sample_profile();
  p.layers[0].evidence[2] = p.compressions + 1;
  try {
    p.validate();
    FAIL() << "a count above the compressions must be refused";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("layers[0].evidence_counts[2]"), std::string::npos) << e.what();
  }
  p = sample_profile();
  p.layers.clear();
  EXPECT_EQ(status_of([&] { p.validate(); }), Status::bad_config);
  p = sample_profile();
  p.tuned_end = p.tuned_begin - 1;
  EXPECT_EQ(status_of([&] { p.validate(); }), Status::bad_config);
}

TEST(Profile, HugeCountersAreRefusedOnLoadAndSaturateWhenRefined) {
  TuningProfile p = sample_profile();
  for (int64_t c : {INT64_MAX, kProfileMaxCompressions + 1}) {
    p.compressions = c;
    EXPECT_EQ(status_of([&] { p.validate(); }), Status::bad_config) << c;
    EXPECT_EQ(status_of([&] { profile_to_bytes(p); }), Status::bad_config) << c;
  }
  // At the limit a profile loads; a session's auto compressions refine its shares, the counters stay in range and
  // the profile still saves.
  p = sample_profile();
  p.compressions = kProfileMaxCompressions;
  p.layers[0].evidence[0] = kProfileMaxCompressions;
  const std::string bytes = profile_to_bytes(p);
  const TuningProfile loaded = profile_from_bytes(bytes.data(), bytes.size());
  Session s(stories(), auto_options(48));
  s.compressor().set_profile(loaded);
  const int32_t id = add_story(s);
  s.compressor().compress(s.fork_sequence(id), 40);
  s.compressor().compress(s.fork_sequence(id), 32);
  ASSERT_NE(s.compressor().profile(), nullptr);
  EXPECT_EQ(s.compressor().profile()->compressions, kProfileMaxCompressions);
  for (const ProfileLayer &L : s.compressor().profile()->layers)
    for (int64_t e : L.evidence) EXPECT_LE(e, kProfileMaxCompressions);
  EXPECT_NO_THROW(profile_to_bytes(*s.compressor().profile()));
}

TEST(Profile, AnotherModelsProfileIsRefusedAndTheSessionUnchanged) {
  Session s(stories(), auto_options(48));
  TuningProfile p = sample_profile();
  p.weights_fingerprint ^= 1;
  EXPECT_EQ(status_of([&] { s.compressor().set_profile(p); }), Status::wrong_model);
  p = sample_profile();
  p.tokenizer_fingerprint ^= 1;
  EXPECT_EQ(status_of([&] { s.compressor().set_profile(p); }), Status::wrong_model);
  p = sample_profile();
  p.layers.push_back(ProfileLayer{});
  EXPECT_EQ(status_of([&] { s.compressor().set_profile(p); }), Status::wrong_model);
  EXPECT_EQ(s.compressor().profile(), nullptr);
  s.compressor().set_profile(sample_profile());
  ASSERT_NE(s.compressor().profile(), nullptr);
  EXPECT_TRUE(s.compressor().profile_guides());
  p.weights_fingerprint ^= 1;
  EXPECT_ANY_THROW(s.compressor().set_profile(p));
  EXPECT_EQ(s.compressor().profile()->tag, "stories");  // the loaded one stays
}

TEST(Profile, AutoCompressionsRefineTheProfile) {
  Session s(stories(), auto_options(48));
  const int32_t id = add_story(s);
  EXPECT_EQ(s.compressor().profile(), nullptr);
  TuningProfile start = TuningProfile::empty(stories()->weights_fingerprint(), stories()->tokenizer().fingerprint(), stories()->hparams().n_layer);
  s.compressor().set_profile(start);
  std::vector<AutoReport> reports;
  for (int32_t budget : {64, 40}) {
    const int32_t f = s.fork_sequence(id);
    s.compressor().compress(f, budget);
    reports.push_back(s.compressor().state(f).auto_report);
    ASSERT_FALSE(reports.back().empty());
  }
  const TuningProfile *p = s.compressor().profile();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->compressions, 2);
  const double L = static_cast<double>(p->layers.size());
  for (size_t l = 0; l < p->layers.size(); ++l) {
    int64_t total = 0;
    for (int64_t c : p->layers[l].evidence) total += c;
    EXPECT_EQ(total, 2) << "layer " << l;
    for (const AutoReport &r : reports)
      EXPECT_GE(p->layers[l].evidence[static_cast<size_t>(r.layers[l].evidence)], 1);
    const double want = 0.5 * (reports[0].layers[l].budget / (reports[0].uniform_tokens / L) +
                               reports[1].layers[l].budget / (reports[1].uniform_tokens / L));
    EXPECT_NEAR(p->layers[l].share, want, 1e-9) << "layer " << l;
  }
  // A quality target has no uniform budget: it does not change the shares.
  const int32_t q = s.fork_sequence(id);
  CompressionConfig target = s.compressor().config();
  target.max_loss = 0.05;
  s.compressor().set_config(target);
  s.compressor().compress(q, 0);
  target.max_loss = 0;
  s.compressor().set_config(target);
  EXPECT_EQ(s.compressor().profile()->compressions, 2);
}

TEST(Profile, WithoutOneTheFirstAutoCompressionStartsARecordOnlyProfile) {
  Session s(stories(), auto_options(48));
  const int32_t id = add_story(s);
  s.compressor().compress(id);
  ASSERT_NE(s.compressor().profile(), nullptr);
  EXPECT_FALSE(s.compressor().profile_guides());
  EXPECT_EQ(s.compressor().profile()->compressions, 1);
  EXPECT_EQ(s.compressor().profile()->weights_fingerprint, stories()->weights_fingerprint());
}

TEST(Profile, FloorsFollowTheProfilesShares) {
  // Layer 0 recorded at 1.5x the uniform budget: its floor is 0.75 B, so it keeps at least that.
  TuningProfile p = sample_profile();
  for (ProfileLayer &L : p.layers) L.share = 0.5;
  p.layers[0].share = 3.0;  // clamped to 1.5
  for (int32_t budget : {32, 48, 64}) {
    Session s(stories(), auto_options(budget));
    s.compressor().set_profile(p);
    const int32_t id = add_story(s);
    s.compressor().compress(id);
    const AutoReport &r = s.compressor().state(id).auto_report;
    ASSERT_FALSE(r.empty());
    EXPECT_GE(r.layers[0].budget, static_cast<int32_t>(0.75 * budget)) << "budget " << budget;
    for (const AutoLayerChoice &c : r.layers) EXPECT_GE(c.budget, static_cast<int32_t>(0.25 * budget));
  }
}

TEST(Profile, SnapshotRecordsTheProfileTagAndCompressions) {
  Session s(stories(), auto_options(48));
  TuningProfile p = sample_profile();
  p.tag = "emma-tuned";
  s.compressor().set_profile(p);
  const int32_t id = add_story(s);
  s.compressor().compress(id);
  const std::string path = temp_path("snap.ikvs");
  snapshot::save_file(s, id, nullptr, path);
  snapshot::FileSource src(path);
  const snapshot::Summary sum = snapshot::inspect(src);
  EXPECT_EQ(sum.profile_tag, "emma-tuned");
  EXPECT_EQ(sum.profile_compressions, 5);
  EXPECT_NE(snapshot::summary_json(sum).find("\"profile\":{\"tag\":\"emma-tuned\",\"compressions\":5}"), std::string::npos);
  EXPECT_NE(snapshot::summary_text(sum).find("profile:      'emma-tuned', 5 compressions seen"), std::string::npos);
  // Restore ignores it: a session without a profile restores the sequence and keeps none.
  Session r(stories(), auto_options(48));
  snapshot::restore_file(r, nullptr, path);
  EXPECT_EQ(r.compressor().profile(), nullptr);
  std::filesystem::remove(path);
  // Without a profile: none recorded.
  SessionOptions o;
  o.n_threads = 2;
  Session n(stories(), o);
  const int32_t nid = add_story(n);
  snapshot::save_file(n, nid, nullptr, path);
  snapshot::FileSource src2(path);
  EXPECT_EQ(snapshot::inspect(src2).profile_compressions, -1);
  std::filesystem::remove(path);
}

TEST(Profile, CApiLoadsSavesAndDescribes) {
  ikv_model *m = nullptr;
  ASSERT_EQ(ikv_model_load(&m, (infokv_test::models_dir() + "/stories260K/stories260K.gguf").c_str()), IKV_OK);
  ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
  o.n_threads = 2;
  o.policy = IKV_POLICY_AUTO;
  o.budget_tokens = 48;
  ikv_session *s = nullptr;
  ASSERT_EQ(ikv_session_create(&s, m, &o), IKV_OK) << ikv_last_error_message();
  int64_t comp = -1;
  int32_t layers = -1, guides = -1;
  EXPECT_EQ(ikv_session_profile_info(&comp, &layers, &guides, s), IKV_OK);
  EXPECT_EQ(comp, 0);
  EXPECT_EQ(layers, 0);
  EXPECT_EQ(guides, 0);
  const std::string out = temp_path("capi.ikvp");
  EXPECT_EQ(ikv_session_save_profile(s, out.c_str()), IKV_ERR_BAD_STATE);
  size_t len = 99;
  EXPECT_EQ(ikv_session_profile_tag(nullptr, 0, &len, s), IKV_ERR_BAD_STATE);
  EXPECT_EQ(ikv_session_load_profile(s, temp_path("missing.ikvp").c_str()), IKV_ERR_IO);
  EXPECT_EQ(ikv_session_load_profile(s, nullptr), IKV_ERR_INVALID_ARGUMENT);
  // Another model's profile: refused, the session still has none.
  TuningProfile wrong = sample_profile();
  wrong.weights_fingerprint ^= 1;
  const std::string wpath = temp_path("wrong.ikvp");
  save_profile(wrong, wpath);
  EXPECT_EQ(ikv_session_load_profile(s, wpath.c_str()), IKV_ERR_WRONG_MODEL);
  const std::string junk = temp_path("junk.ikvp");
  {
    infokv_test::TempFile t(std::vector<uint8_t>(64, 0x41), ".ikvp");
    EXPECT_EQ(ikv_session_load_profile(s, t.path().c_str()), IKV_ERR_BAD_CONFIG);
  }
  EXPECT_EQ(ikv_session_profile_info(&comp, &layers, &guides, s), IKV_OK);
  EXPECT_EQ(layers, 0);
  const std::string good = temp_path("good.ikvp");
  save_profile(sample_profile(), good);
  ASSERT_EQ(ikv_session_load_profile(s, good.c_str()), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(ikv_session_profile_info(&comp, &layers, &guides, s), IKV_OK);
  EXPECT_EQ(comp, 4);
  EXPECT_EQ(layers, stories()->hparams().n_layer);
  EXPECT_EQ(guides, 1);
  char tag[32];
  EXPECT_EQ(ikv_session_profile_tag(tag, 3, &len, s), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(len, 7u);
  EXPECT_EQ(ikv_session_profile_tag(tag, sizeof tag, &len, s), IKV_OK);
  EXPECT_STREQ(tag, "stories");
  int32_t seq = -1;
  ASSERT_EQ(ikv_seq_add(&seq, s), IKV_OK);
  std::vector<int32_t> toks = stories()->tokenizer().encode(kStory, true);
  ASSERT_EQ(ikv_decode(s, seq, toks.data(), toks.size()), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(ikv_session_profile_info(&comp, &layers, &guides, s), IKV_OK);
  EXPECT_EQ(comp, 5);  // the prefill's compression refined it
  ASSERT_EQ(ikv_session_save_profile(s, out.c_str()), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(load_profile(out).compressions, 5);
  EXPECT_EQ(ikv_session_profile_info(nullptr, &layers, &guides, s), IKV_ERR_INVALID_ARGUMENT);
  ikv_session_free(s);
  ikv_model_free(m);
  for (const std::string &f : {out, wpath, good, junk}) std::filesystem::remove(f);
}

#ifdef INFOKV_CLI_PATH
namespace {
int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
}  // namespace

TEST(ProfileCli, TuneWritesALoadableProfileAndEvalRefusesItsTokens) {
  const std::string corpus = infokv_test::corpora_dir() + "/emma.txt";
  const std::string model = infokv_test::models_dir() + "/stories260K/stories260K.gguf";
  const std::string out = temp_path("cli.ikvp");
  const std::string cli = std::string(INFOKV_CLI_PATH);
  const std::string common = " --model '" + model + "' --file '" + corpus + "' --threads 2 --prefix 64 --continuation 16";
  const infokv_test::CommandOutput t = infokv_test::run_command(cli + " tune" + common + " --windows 2 --offset 100 --tag emma" +
                                                                " --max-losses 0.02 --out '" + out + "' 2>&1");
  ASSERT_EQ(exit_code(t.status), 0) << t.out;
  EXPECT_NE(t.out.find("calibration: max loss 0.02 -> mean KL"), std::string::npos) << t.out;
  const TuningProfile p = load_profile(out);
  EXPECT_EQ(p.tag, "emma");
  EXPECT_EQ(p.compressions, 4);  // 2 windows x 2 budgets
  EXPECT_EQ(p.tuned_file, "emma.txt");
  EXPECT_EQ(p.tuned_begin, 100);
  EXPECT_EQ(p.tuned_end, 100 + 2 * 80);
  ASSERT_EQ(p.calibration.size(), 1u);
  EXPECT_EQ(p.calibration[0].max_loss, 0.02);
  Session s(stories(), auto_options(48));
  s.compressor().set_profile(p);  // the model's own: accepted
  // eval on tokens it was tuned on: refused (exit 2); after them: runs.
  const std::string eval = cli + " eval" + common + " --policies auto --budgets 0.25 --profile '" + out + "'";
  const infokv_test::CommandOutput bad = infokv_test::run_command(eval + " --windows 1 --offset 200 2>&1");
  EXPECT_EQ(exit_code(bad.status), 2) << bad.out;
  EXPECT_NE(bad.out.find("was tuned on this text's tokens [100, 260)"), std::string::npos) << bad.out;
  const infokv_test::CommandOutput before = infokv_test::run_command(eval + " --windows 1 --offset 20 2>&1");
  EXPECT_EQ(exit_code(before.status), 0) << before.out;
  const infokv_test::CommandOutput ok = infokv_test::run_command(eval + " --windows 1 --offset 260 2>&1");
  EXPECT_EQ(exit_code(ok.status), 0) << ok.out;
  // generate takes it too; a damaged one is refused.
  const infokv_test::CommandOutput g = infokv_test::run_command(cli + " generate --model '" + model + "' --prompt 'Once upon' --max-tokens 2 --temperature 0 --profile '" + out + "' 2>&1");
  EXPECT_EQ(exit_code(g.status), 0) << g.out;
  const infokv_test::CommandOutput d = infokv_test::run_command(cli + " generate --model '" + model + "' --prompt 'Once upon' --max-tokens 2 --profile '" + corpus + "' 2>&1");
  EXPECT_EQ(exit_code(d.status), 1) << d.out;
  EXPECT_NE(d.out.find("tuning profile"), std::string::npos) << d.out;
  std::filesystem::remove(out);
}
#endif
