#include "compress/policy.hpp"

#include <cmath>

#include "util/error.hpp"

namespace infokv {

const char *policy_name(PolicyKind p) {
  switch (p) {
    case PolicyKind::none: return "none";
    case PolicyKind::infokv: return "infokv";
    case PolicyKind::snapkv: return "snapkv";
    case PolicyKind::h2o: return "h2o";
    case PolicyKind::streaming: return "streaming";
    case PolicyKind::tova: return "tova";
    case PolicyKind::pyramidkv: return "pyramidkv";
  }
  return "unknown";
}

PolicyKind parse_policy(const std::string &name) {
  for (int i = 0; i <= 6; ++i) {
    auto p = static_cast<PolicyKind>(i);
    if (name == policy_name(p)) return p;
  }
  fail(Status::invalid_argument, "unknown policy '" + name + "' (known: none, infokv, snapkv, h2o, streaming, tova, pyramidkv)");
}

bool CompressionConfig::needs_window_queries() const {
  switch (policy) {
    case PolicyKind::infokv: case PolicyKind::snapkv: case PolicyKind::pyramidkv: case PolicyKind::tova: return true;
    default: return false;
  }
}

void CompressionConfig::validate() const {
  auto bad = [](const std::string &what) { fail(Status::invalid_argument, "compression parameter " + what); };
  if (!(budget_fraction >= 0.0 && budget_fraction <= 1.0)) bad("budget fraction must be in (0, 1]");
  if (budget_tokens < 0) bad("budget tokens must not be negative");
  if (policy != PolicyKind::none && budget_tokens == 0 && budget_fraction <= 0.0) bad("budget is required for policy " + std::string(policy_name(policy)));
  if (window > 4096) bad("window must be at most 4096");
  if (pool_kernel_prefill < 1 || pool_kernel_prefill % 2 == 0 || pool_kernel_prefill > 63) bad("pooling kernel (prefill) must be odd, 1..63");
  if (pool_kernel_decode < 1 || pool_kernel_decode % 2 == 0 || pool_kernel_decode > 63) bad("pooling kernel (decode) must be odd, 1..63");
  if (!(alpha >= 0.0f && alpha <= 1.0f)) bad("alpha must be in [0, 1]");
  if (!(tau >= 0.0f && std::isfinite(tau))) bad("tau must be finite and >= 0");
  if (entropy_top_k < 1) bad("entropy top-k must be >= 1");
  if (interval < 1) bad("interval must be >= 1");
  if (!(beta > 1.0f && std::isfinite(beta))) bad("beta must be > 1");
  if (sink < 0) bad("sink must be >= 0");
}

}  // namespace infokv
