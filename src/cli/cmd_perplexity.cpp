#include <cmath>
#include <cstdio>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "cli/eval_metrics.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

// log p(target) under softmax(logits), in double.
double log_prob(const float *logits, int32_t n, int32_t target) {
  double mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double z = 0;
  for (int32_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  return static_cast<double>(logits[target]) - mx - std::log(z);
}

int cmd_perplexity(int argc, char **argv) {
  std::set<std::string> valued = {"model", "file", "max-tokens"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json"});
  const std::string path = model_path_from(a);
  const std::string text = read_file(a.required("file"));
  const int64_t max_tokens = a.integer("max-tokens", 0, 0, INT64_MAX);
  SessionOptions so = session_options_from(a);
  if (a.has("profile")) fail(Status::invalid_argument, "perplexity runs with the full cache; --profile is for generate, chat and eval");
  if (so.compression.enabled()) fail(Status::invalid_argument, "perplexity runs with the full cache; use 'infokv eval' for compression");
  auto model = Model::load(path);
  const Tokenizer &tok = model->tokenizer();
  std::vector<int32_t> ids = tok.encode(text, false);
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  if (ids.empty()) fail(Status::invalid_argument, "the file has no tokens");
  std::vector<int32_t> seq_tokens;
  if (tok.bos() >= 0) seq_tokens.push_back(tok.bos());
  seq_tokens.insert(seq_tokens.end(), ids.begin(), ids.end());
  // Size the pool for the whole text unless the user chose a size.
  if (so.kv_pool_blocks == 0 && so.kv_pool_bytes == 0) {
    const int64_t per_layer = (static_cast<int64_t>(seq_tokens.size()) + so.block_size - 1) / so.block_size + 1;
    so.kv_pool_blocks = per_layer * model->hparams().n_layer;
  }
  Session session(model, so);
  const int32_t seq = session.add_sequence();
  const int32_t V = model->hparams().n_vocab;
  double nll = 0;
  int64_t count = 0;
  // Item i's logits predict token i + 1, so the last token is never fed.
  const size_t chunk = static_cast<size_t>(so.ubatch);
  const size_t n_items = seq_tokens.size() - 1;  // items whose logits predict a kept token
  for (size_t c0 = 0; c0 < n_items; c0 += chunk) {
    const size_t c1 = std::min(n_items, c0 + chunk);
    std::vector<BatchToken> batch;
    for (size_t i = c0; i < c1; ++i) batch.push_back({seq, seq_tokens[i], true});
    session.decode(batch);
    const std::vector<float> &lg = session.batch_logits();
    for (size_t i = c0; i < c1; ++i) {
      nll -= log_prob(lg.data() + (i - c0) * static_cast<size_t>(V), V, seq_tokens[i + 1]);
      ++count;
    }
  }
  if (count == 0) fail(Status::invalid_argument, "need at least two tokens (the model has no BOS token)");
  const double mean = nll / static_cast<double>(count);
  if (a.flag("json")) {
    JsonObject o;
    o.integer("tokens", count).num("mean_nll", mean).num("ppl", std::exp(mean));
    std::printf("%s\n", o.dump().c_str());
  } else {
    std::printf("tokens %lld  mean NLL %.6f  perplexity %.4f\n", static_cast<long long>(count), mean, std::exp(mean));
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
