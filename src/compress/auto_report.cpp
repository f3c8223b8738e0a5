#include "compress/auto_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace infokv {

namespace {

// Shortest "%g" form that reads back as the same value; `single` compares as float (the per-layer fields are floats,
// and their double widening would print 17 digits of noise).
std::string shortest(double v, bool single) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    const double back = std::strtod(b, nullptr);
    if (single ? static_cast<float>(back) == static_cast<float>(v) : back == v) break;
  }
  return b;
}

std::string short_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

}  // namespace

std::string auto_report_summary(const AutoReport &r, const std::vector<KvDtype> &dtypes, KvDtype base) {
  if (r.empty()) return "";
  int64_t count[kEvidenceKinds] = {};
  for (const AutoLayerChoice &c : r.layers) {
    const auto e = static_cast<int32_t>(c.evidence);
    if (e >= 0 && e < kEvidenceKinds) ++count[e];
  }
  std::vector<int32_t> order;
  for (int32_t e = 0; e < kEvidenceKinds; ++e)
    if (count[e] > 0) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return count[a] > count[b]; });
  std::string s = std::to_string(r.layers.size()) + " layers, mean proxy loss " + short_text(r.loss) + ", kept " +
                  std::to_string(r.tokens) + " tokens (";
  s += r.max_loss > 0 ? "quality target: max loss " + short_text(r.max_loss) +
                           (r.uniform_tokens > 0 ? ", at most a budget's " + std::to_string(r.uniform_tokens) : std::string())
                     : "uniform budget: " + std::to_string(r.uniform_tokens);
  s += "); evidence:";
  for (size_t i = 0; i < order.size(); ++i)
    s += std::string(i ? ", " : " ") + evidence_name(static_cast<Evidence>(order[i])) + " x" + std::to_string(count[order[i]]);
  int64_t other[6] = {};
  for (KvDtype d : dtypes)
    if (d != base && kv_dtype_valid(static_cast<int32_t>(d))) ++other[static_cast<int32_t>(d)];
  for (int32_t d = 1; d <= 5; ++d)
    if (other[d] > 0) s += std::string("; ") + kv_dtype_name(static_cast<KvDtype>(d)) + " layers: " + std::to_string(other[d]);
  return s;
}

std::vector<std::string> auto_report_layer_lines(const AutoReport &r, const std::vector<KvDtype> &dtypes) {
  std::vector<std::string> out;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const AutoLayerChoice &c = r.layers[l];
    out.push_back("layer " + std::to_string(l) + ": " + evidence_name(c.evidence) + ", alpha " + short_text(c.alpha) +
                  ", budget " + std::to_string(c.budget) + ", loss " + short_text(c.loss) +
                  (l < dtypes.size() ? std::string(", ") + kv_dtype_name(dtypes[l]) : std::string()));
  }
  return out;
}

std::string auto_report_json(const AutoReport &r, const std::vector<KvDtype> &dtypes) {
  if (r.empty()) return "null";
  std::string s = "{\"layers\":[";
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const AutoLayerChoice &c = r.layers[l];
    s += std::string(l ? "," : "") + "{\"layer\":" + std::to_string(l) + ",\"evidence\":\"" + evidence_name(c.evidence) +
         "\",\"alpha\":" + shortest(c.alpha, true) + ",\"budget\":" + std::to_string(c.budget) +
         ",\"loss\":" + shortest(c.loss, true) +
         (l < dtypes.size() ? std::string(",\"dtype\":\"") + kv_dtype_name(dtypes[l]) + "\"" : std::string()) + "}";
  }
  s += "],\"loss\":" + shortest(r.loss, false) + ",\"tokens\":" + std::to_string(r.tokens) +
       ",\"uniform_tokens\":" + std::to_string(r.uniform_tokens) + ",\"max_loss\":" + shortest(r.max_loss, false) + "}";
  return s;
}

}  // namespace infokv
