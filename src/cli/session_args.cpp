#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "compress/policy_table.hpp"
#include "cli/args.hpp"
#include "config/config.hpp"
#include "util/error.hpp"
#include "util/limits.hpp"

namespace infokv {
namespace cli {

const std::set<std::string> &session_option_names() {
  static const std::set<std::string> names = {
      "threads", "kv-dtype", "block-size", "kv-pool-mb", "kv-pool-blocks", "kv-pool-fraction", "ubatch", "policy", "budget",
      "compress-interval", "window", "alpha", "tau", "entropy-top-k", "pool-kernel-prefill", "pool-kernel-decode",
      "budget-shape", "beta", "sink", "device", "config", "max-loss", "profile", "question", "layer-precision"};
  return names;
}

void parse_budget(const std::string &s, double *fraction, int32_t *tokens) {
  *fraction = 0;
  *tokens = 0;
  if (s.empty()) fail(Status::invalid_argument, "empty budget");
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string rest = end;
  if (end == s.c_str() || !std::isfinite(v) || (rest != "" && rest != "%"))
    fail(Status::invalid_argument, "budget '" + s + "' is neither a fraction (0.25, 25%) nor a token count (128)");
  if (rest == "%") v /= 100.0;
  if (v > 0 && v <= 1.0 && (rest == "%" || s.find('.') != std::string::npos || v < 1.0)) {
    *fraction = v;
  } else if (v >= 1 && std::floor(v) == v && v < 1e9) {
    *tokens = static_cast<int32_t>(v);
  } else {
    fail(Status::invalid_argument, "budget '" + s + "' must be a fraction in (0, 1] or a positive token count");
  }
}

Config config_from_args(const Args &a) {
  if (!a.has("config")) return Config{};
  const std::string path = a.str("config");
  try {
    return config_from_file(path);
  } catch (const Error &e) {
    if (e.status() == Status::io) throw;  // the file itself: its message names it
    fail(Status::invalid_argument, path + ": " + e.what());
  }
}

std::string model_path_from(const Args &a) {
  if (a.has("model")) return resolve_model_path(a.str("model"));
  const Config c = config_from_args(a);
  if (c.model_path.empty()) return resolve_model_path(default_model_path());
  // The library's rule (working directory, then $INFOKV_MODELS_DIR; main() sets that to the CLI's default models
  // folder when it is unset).
  return resolve_config_model_path(c.model_path);
}

CompressionConfig compression_from(const Args &a) { return compression_from(a, CompressionConfig{}); }

CompressionConfig compression_from(const Args &a, const CompressionConfig &base) {
  CompressionConfig c = base;
  if (a.has("policy")) c.policy = parse_policy(a.str("policy"));
  if (a.has("budget")) parse_budget(a.str("budget"), &c.budget_fraction, &c.budget_tokens);
  if (a.has("question")) c.question = parse_question(a.str("question"));
  if (a.has("max-loss")) {
    const double big = std::numeric_limits<double>::max();
    c.max_loss = a.number("max-loss", 0.0, -big, big);
    if (c.max_loss < 0) fail(Status::invalid_argument, "--max-loss must be >= 0 (0: compress to --budget)");
  }
  // A budget or a quality target with no policy named (neither by --policy nor by the config) means auto: the
  // runtime chooses what to keep (packaging/docs/quality.md: auto against every fixed policy).
  if (!a.has("policy") && c.policy == PolicyKind::none && (a.has("budget") || c.max_loss > 0)) c.policy = PolicyKind::auto_;
  if (c.max_loss > 0 && !c.is_auto())
    fail(Status::invalid_argument, "a quality target (--max-loss, or the config's compression.max_loss) needs --policy auto, not " +
                                       std::string(policy_name(c.policy)));
  if (c.policy != PolicyKind::none && !c.quality_target() && c.budget_fraction <= 0 && c.budget_tokens <= 0)
    fail(Status::invalid_argument, c.is_auto() ? "--policy auto needs --budget or --max-loss" : "--policy needs --budget");
  c.interval = static_cast<int32_t>(a.integer("compress-interval", c.interval, 0, 1 << 30));
  c.window = static_cast<int32_t>(a.integer("window", c.window, -1, limits::max_window));
  c.alpha = static_cast<float>(a.number("alpha", c.alpha, 0.0, 1.0));
  c.tau = static_cast<float>(a.number("tau", c.tau, 0.0, 1e6));
  c.entropy_top_k = static_cast<int32_t>(a.integer("entropy-top-k", c.entropy_top_k, 1, 1 << 24));
  c.pool_kernel_prefill = static_cast<int32_t>(a.integer("pool-kernel-prefill", c.pool_kernel_prefill, 1, 63));
  c.pool_kernel_decode = static_cast<int32_t>(a.integer("pool-kernel-decode", c.pool_kernel_decode, 1, 63));
  if (a.has("budget-shape")) {
    const std::string shape = a.str("budget-shape");
    if (shape == "uniform") c.shape = BudgetShape::uniform;
    else if (shape == "pyramid") c.shape = BudgetShape::pyramid;
    else fail(Status::invalid_argument, "--budget-shape must be uniform or pyramid");
  }
  c.beta = static_cast<float>(a.number("beta", c.beta, 1.0001, 1e6));
  c.sink = static_cast<int32_t>(a.integer("sink", c.sink, 0, 1 << 20));
  if (a.has("layer-precision")) {
    const std::string lp = a.str("layer-precision");
    if (lp == "auto") c.layer_precision = true;
    else if (lp == "off") c.layer_precision = false;
    else fail(Status::invalid_argument, "--layer-precision must be auto or off (got '" + lp + "')");
  }
  c.validate();
  return c;
}

SessionOptions session_options_from(const Args &a) { return session_options_from(a, config_from_args(a).session); }

SessionOptions session_options_from(const Args &a, const SessionOptions &base) {
  SessionOptions o = base;
  o.n_threads = static_cast<int32_t>(a.integer("threads", o.n_threads, 0, limits::max_threads));
  o.device = a.str("device", o.device);
  if (a.has("kv-dtype")) {
    const std::string dt = a.str("kv-dtype");
    if (!kv_dtype_parse(dt.c_str(), &o.kv_dtype))
      fail(Status::invalid_argument, std::string("--kv-dtype must be ") + kKvDtypeNames + " (got '" + dt + "')");
  }
  o.block_size = static_cast<int32_t>(a.integer("block-size", o.block_size, 1, limits::max_block_size));
  o.ubatch = static_cast<int32_t>(a.integer("ubatch", o.ubatch, 1, 1 << 16));
  if (a.has("kv-pool-mb")) {
    const double mb = a.number("kv-pool-mb", 0, 1e-6, 1 << 20);
    o.kv_pool_bytes = static_cast<int64_t>(mb * 1024.0 * 1024.0);
    if (o.kv_pool_bytes < 1) o.kv_pool_bytes = 1;
    o.kv_pool_blocks = 0;
  }
  o.kv_pool_blocks = a.integer("kv-pool-blocks", o.kv_pool_blocks, 0, int64_t{1} << 30);
  if (a.has("kv-pool-fraction")) {
    o.kv_pool_fraction = a.number("kv-pool-fraction", 0, 1e-6, 1.0);
    o.kv_pool_bytes = o.kv_pool_blocks = 0;  // an explicit size would take precedence
  }
  o.compression = compression_from(a, o.compression);
  return o;
}

std::optional<TuningProfile> profile_from_args(const Args &a) {
  if (!a.has("profile")) return std::nullopt;
  return load_profile(a.str("profile"));
}

void apply_profile(const std::optional<TuningProfile> &p, Session &s) {
  if (p) s.compressor().set_profile(*p);
}

}  // namespace cli
}  // namespace infokv
