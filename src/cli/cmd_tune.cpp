// infokv tune: runs the auto policy over windows of a text as `infokv eval` does (full-cache prefix, a fork
// compressed to each budget, the continuation teacher-forced, KL against the full cache) and writes what it learned
// as a tuning profile (src/compress/profile.hpp): each layer's mean share of the uniform budget and evidence counts
// over every byte-budget compression, and one calibration point (proxy-loss target -> mean KL) per --max-losses.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "compress/policy_table.hpp"
#include "cli/args.hpp"
#include "cli/eval_metrics.hpp"
#include "cli/json.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

int cmd_tune(int argc, char **argv) {
  std::set<std::string> valued = {"model", "file", "tag", "out", "prefix", "continuation", "windows", "offset", "budgets", "max-losses"};
  for (const auto &n : session_option_names())
    if (n != "profile") valued.insert(n);
  Args a(argc, argv, 2, valued, {"json"});
  const std::string path = model_path_from(a);
  const std::string file = a.required("file");
  const std::string out = a.required("out");
  const std::string text = read_file(file);
  const int64_t N = a.integer("prefix", 400, 1, 1 << 24);
  const int64_t M = a.integer("continuation", 100, 1, 1 << 24);
  const int64_t windows = a.integer("windows", 8, 1, 10000);
  const int64_t offset = a.integer("offset", 0, 0, INT64_MAX / 4);
  const std::vector<double> budgets = fraction_list(a.str("budgets", "0.25,0.125"), "tune");
  if (budgets.empty()) fail(Status::invalid_argument, "--budgets needs at least one fraction");
  const std::vector<double> max_losses = positive_list(a.str("max-losses", "0.005,0.01,0.02"), "--max-losses");
  if (a.has("policy") || a.has("budget") || a.has("max-loss"))
    fail(Status::invalid_argument, "tune runs policy auto at --budgets and --max-losses; --policy, --budget and --max-loss do not apply");
  SessionOptions base = session_options_from(a);
  // As eval's protocol (the tokens right after each prefix): next, unless --question says otherwise.
  if (!a.has("question")) base.compression.question = Question::next;
  auto model = Model::load(path);
  const Tokenizer &tok = model->tokenizer();
  const int32_t V = model->hparams().n_vocab;
  const EvalWindows win = eval_windows(tok, text, N, M, windows, offset);
  size_eval_pool(base, *model, N, M, 3);
  TuningProfile prof = TuningProfile::empty(model->weights_fingerprint(), tok.fingerprint(), model->hparams().n_layer);
  prof.tag = a.str("tag", "");
  const size_t slash = file.rfind('/');
  prof.tuned_file = slash == std::string::npos ? file : file.substr(slash + 1);
  prof.tuned_text_xxh3 = profile_text_hash(text);
  prof.tuned_begin = offset;
  prof.tuned_end = win.need();
  std::vector<double> kl_budget(budgets.size(), 0.0), kl_target(max_losses.size(), 0.0);
  const bool progress = isatty(2) != 0;
  for (int64_t w = 0; w < windows; ++w) {
    const std::vector<int32_t> seq = win.window(w);
    const std::vector<float> full = run_full_cache(model, base, seq, N, M).logits;
    SessionOptions so = compress_on_demand(base, PolicyKind::auto_);
    so.compression.max_loss = 0;
    Session s(model, so);
    const int32_t id = decode_prefix(s, seq, N);
    // One fork per budget and per target; the continuation's KL against the full cache. Byte-budget compressions
    // refine the profile.
    auto refine = [&](int32_t f) { prof.refine(s.compressor().state(f).auto_report); };
    for (size_t i = 0; i < budgets.size(); ++i)
      kl_budget[i] += mean_kl(full, run_compressed_fork(s, id, seq, N, M, budget_tokens(budgets[i], N), 0.0, nullptr, refine).logits, M, V) / windows;
    for (size_t i = 0; i < max_losses.size(); ++i)
      kl_target[i] += mean_kl(full, run_compressed_fork(s, id, seq, N, M, 0, max_losses[i]).logits, M, V) / windows;
    if (progress) std::fprintf(stderr, "\rtune: window %lld/%lld", static_cast<long long>(w + 1), static_cast<long long>(windows));
  }
  if (progress) std::fprintf(stderr, "\n");
  for (size_t i = 0; i < max_losses.size(); ++i) prof.calibration.push_back({max_losses[i], kl_target[i]});
  save_profile(prof, out);
  auto dominant = [](const ProfileLayer &L) {
    return static_cast<int32_t>(std::max_element(L.evidence.begin(), L.evidence.end()) - L.evidence.begin());
  };
  if (a.flag("json")) {
    JsonObject o;
    std::string layers = "[";
    for (size_t l = 0; l < prof.layers.size(); ++l) {
      const ProfileLayer &L = prof.layers[l];
      JsonObject j;
      j.num("share", L.share).ints("evidence_counts", std::vector<int64_t>(L.evidence.begin(), L.evidence.end()))
          .str("dominant_evidence", evidence_name(static_cast<Evidence>(dominant(L))));
      layers += (l ? "," : "") + j.dump();
    }
    std::string cal = "[", kb = "[";
    for (size_t i = 0; i < prof.calibration.size(); ++i)
      cal += (i ? "," : "") + JsonObject().num("max_loss", prof.calibration[i].max_loss).num("kl", prof.calibration[i].kl).dump();
    for (size_t i = 0; i < budgets.size(); ++i) kb += (i ? "," : "") + JsonObject().num("budget", budgets[i]).num("kl", kl_budget[i]).dump();
    o.str("out", out).str("tag", prof.tag).integer("compressions", prof.compressions).str("tuned_file", prof.tuned_file)
        .integer("tuned_begin", prof.tuned_begin).integer("tuned_end", prof.tuned_end).raw("layers", layers + "]")
        .raw("calibration", cal + "]").raw("budgets", kb + "]");
    std::printf("%s\n", o.dump().c_str());
  } else {
    std::printf("tuning profile '%s' -> %s: %lld compressions over %lld window(s) of %s, tokens [%lld, %lld)\n", prof.tag.c_str(),
                out.c_str(), static_cast<long long>(prof.compressions), static_cast<long long>(windows), prof.tuned_file.c_str(),
                static_cast<long long>(prof.tuned_begin), static_cast<long long>(prof.tuned_end));
    std::printf("%-6s %7s  %s\n", "layer", "share", "evidence chosen most");
    for (size_t l = 0; l < prof.layers.size(); ++l) {
      const ProfileLayer &L = prof.layers[l];
      const int32_t d = dominant(L);
      std::printf("%-6zu %7.3f  %s (%lld of %lld)\n", l, L.share, evidence_name(static_cast<Evidence>(d)),
                  static_cast<long long>(L.evidence[static_cast<size_t>(d)]), static_cast<long long>(prof.compressions));
    }
    for (size_t i = 0; i < budgets.size(); ++i) std::printf("budget %.1f%%: mean KL %.5f\n", budgets[i] * 100, kl_budget[i]);
    for (const CalibrationPoint &c : prof.calibration) std::printf("calibration: max loss %g -> mean KL %.5f\n", c.max_loss, c.kl);
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
