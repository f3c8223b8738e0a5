#include "compress/policy.hpp"

#include <algorithm>
#include <cmath>

#include "compress/policy_table.hpp"
#include "util/error.hpp"
#include "util/limits.hpp"

namespace infokv {

const PolicyInfo *policy_by_name(std::string_view name) {
  for (const PolicyInfo &p : kPolicyTable)
    if (name == p.name) return &p;
  return nullptr;
}

const PolicyInfo *policy_by_c_value(int32_t v) {
  for (const PolicyInfo &p : kPolicyTable)
    if (v == p.c_value) return &p;
  return nullptr;
}

const PolicyInfo *policy_by_schema_value(int32_t v) {
  for (const PolicyInfo &p : kPolicyTable)
    if (v == p.schema_value) return &p;
  return nullptr;
}

const PolicyInfo &policy_info(PolicyKind k) {
  const auto i = static_cast<size_t>(k);
  if (i >= kPolicyTable.size()) fail(Status::internal, "policy value " + std::to_string(static_cast<int32_t>(k)) + " is not in the policy table");
  return kPolicyTable[i];
}

std::string policy_names_list() {
  std::string s;
  for (const PolicyInfo &p : kPolicyTable) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

const char *policy_name(PolicyKind p) {
  const auto i = static_cast<size_t>(p);
  return i < kPolicyTable.size() ? kPolicyTable[i].name : "unknown";
}

PolicyKind parse_policy(const std::string &name) {
  if (const PolicyInfo *p = policy_by_name(name)) return p->kind;
  fail(Status::invalid_argument, "unknown policy '" + name + "' (known: " + policy_names_list() + ")");
}

const char *question_name(Question q) {
  switch (q) {
    case Question::both: return "both";
    case Question::next: return "next";
    case Question::later: return "later";
  }
  return "unknown";
}

Question parse_question(const std::string &name) {
  for (Question q : {Question::both, Question::next, Question::later})
    if (name == question_name(q)) return q;
  fail(Status::invalid_argument, "unknown question '" + name + "' (known: both, next, later)");
}

bool CompressionConfig::is_auto() const { return policy == PolicyKind::auto_; }
bool CompressionConfig::enabled() const { return policy != PolicyKind::none; }
bool CompressionConfig::needs_window_queries() const { return (policy_info(policy).reads & kReadsWindow) != 0; }
bool CompressionConfig::needs_accumulated_attention() const { return (policy_info(policy).reads & kReadsAttentionSums) != 0; }
bool CompressionConfig::needs_entropy() const { return (policy_info(policy).reads & kReadsEntropy) != 0; }
bool CompressionConfig::needs_replay() const { return (policy_info(policy).reads & kReadsReplay) != 0; }

void add_span(std::vector<ProtectedSpan> &spans, const ProtectedSpan &span) {
  if (span.begin < 0 || span.end < span.begin) fail(Status::invalid_argument, "protected span must satisfy 0 <= begin <= end");
  if (span.begin == span.end) return;
  if (span.fair) {
    for (const ProtectedSpan &s : spans)
      if (s.fair && s.begin == span.begin && s.end == span.end) return;
  } else {
    ProtectedSpan merged = span;
    std::vector<ProtectedSpan> rest;
    rest.reserve(spans.size() + 1);
    for (const ProtectedSpan &s : spans) {
      if (!s.fair && s.begin <= merged.end && merged.begin <= s.end) {
        merged.begin = std::min(merged.begin, s.begin);
        merged.end = std::max(merged.end, s.end);
      } else {
        rest.push_back(s);
      }
    }
    rest.push_back(merged);
    if (static_cast<int64_t>(rest.size()) > kMaxProtectedSpans)
      fail(Status::out_of_range, "a sequence holds at most " + std::to_string(kMaxProtectedSpans) + " protected spans");
    spans = std::move(rest);
    return;
  }
  if (static_cast<int64_t>(spans.size()) >= kMaxProtectedSpans)
    fail(Status::out_of_range, "a sequence holds at most " + std::to_string(kMaxProtectedSpans) + " protected spans");
  spans.push_back(span);
}

std::vector<ProtectedSpan> protection_within(const std::vector<ProtectedSpan> &spans, int64_t candidates_end,
                                             int64_t all_cap, int64_t rest_cap, int64_t *released) {
  if (released != nullptr) *released = 0;
  auto held = [&](const ProtectedSpan &s) {
    return s.fair ? int64_t{0} : std::max<int64_t>(0, std::min(s.end, candidates_end) - s.begin);
  };
  std::vector<size_t> order;  // never-evicted spans holding candidates, by position
  int64_t total = 0;
  for (size_t i = 0; i < spans.size(); ++i)
    if (held(spans[i]) > 0) {
      order.push_back(i);
      total += held(spans[i]);
    }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a].begin < spans[b].begin; });
  const int64_t first = order.empty() ? 0 : held(spans[order[0]]);
  if (total <= all_cap && total - first <= rest_cap) return spans;
  std::vector<char> drop(spans.size(), 0);
  auto release = [&](size_t i) {
    drop[i] = 1;
    total -= held(spans[i]);
    if (released != nullptr) *released += held(spans[i]);
  };
  for (size_t k = 1; k < order.size() && (total > all_cap || total - first > rest_cap); ++k) release(order[k]);
  if (total > all_cap) release(order[0]);
  std::vector<ProtectedSpan> out;
  for (size_t i = 0; i < spans.size(); ++i)
    if (!drop[i]) out.push_back(spans[i]);
  return out;
}

void CompressionConfig::validate() const {
  auto bad = [](const std::string &what) { fail(Status::invalid_argument, "compression parameter " + what); };
  if (!(budget_fraction >= 0.0 && budget_fraction <= 1.0)) bad("budget fraction must be in (0, 1]");
  if (budget_tokens < 0) bad("budget tokens must not be negative");
  if (!(max_loss >= 0.0 && std::isfinite(max_loss))) bad("max loss must be finite and >= 0");
  if (max_loss > 0.0 && policy != PolicyKind::auto_) bad("max loss (a quality target) needs policy auto");
  if (policy != PolicyKind::none && !quality_target() && budget_tokens == 0 && budget_fraction <= 0.0)
    bad("budget is required for policy " + std::string(policy_name(policy)));
  if (window > limits::max_window) bad("window must be at most " + std::to_string(limits::max_window));
  if (pool_kernel_prefill < 1 || pool_kernel_prefill % 2 == 0 || pool_kernel_prefill > 63) bad("pooling kernel (prefill) must be odd, 1..63");
  if (pool_kernel_decode < 1 || pool_kernel_decode % 2 == 0 || pool_kernel_decode > 63) bad("pooling kernel (decode) must be odd, 1..63");
  if (!(alpha >= 0.0f && alpha <= 1.0f)) bad("alpha must be in [0, 1]");
  if (!(tau >= 0.0f && std::isfinite(tau))) bad("tau must be finite and >= 0");
  if (entropy_top_k < 1) bad("entropy top-k must be >= 1");
  if (interval < 0) bad("interval must be >= 0 (0: compress when memory requires it)");
  if (!(beta > 1.0f && std::isfinite(beta))) bad("beta must be > 1");
  if (sink < 0) bad("sink must be >= 0");
  if (question != Question::both && question != Question::next && question != Question::later)
    bad("question must be both, next or later");
}

}  // namespace infokv
