// Compression policies (DESIGN.md §4): which cached tokens each layer keeps when a budget is exceeded.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "util/defaults.hpp"
#include "util/limits.hpp"

namespace infokv {

// A compression policy: its values are the rows of the policy table (compress/policy_table.hpp), where a new policy
// is one row; 0 is none.
enum class PolicyKind : int32_t;
enum class BudgetShape : int32_t { uniform = 0, pyramid = 1 };

// Both go through the policy table (compress/policy_table.hpp).
const char *policy_name(PolicyKind p);
PolicyKind parse_policy(const std::string &name);  // throws Error(invalid_argument) listing the known names

// Which question a compression serves (DESIGN.md §9, "Which question"), i.e. whose queries are the evidence of the
// window policies (snapkv, infokv, tova, pyramidkv) and of auto's proxy:
// - next: the tokens that follow at once (a reply being generated): the observation window's own queries;
// - later: a question not yet asked (a chat's history, a saved snapshot, a document): the queries of a probe
//   question about the sequence (Session::probe_queries) stand in for it;
// - both: the window's rows and the probe's together (what either ranks high: rank_max).
// Values are stable (configs, the C API); append only.
enum class Question : int32_t { both = 0, next = 1, later = 2 };
const char *question_name(Question q);                // "both", "next", "later"
Question parse_question(const std::string &name);     // throws Error(invalid_argument) naming the three

struct ProtectedSpan {
  int64_t begin = 0;  // positions [begin, end)
  int64_t end = 0;
  bool fair = false;  // false: never evicted; true: keeps the same fraction as every other fair span
};

// Spans per sequence: each compression visits every span, and a snapshot or an app must not be able to make that
// unbounded (a million spans would make each compression take seconds).
constexpr int32_t kMaxProtectedSpans = limits::max_protected_spans;

// Adds `span` to `spans`, merging never-evicted spans that overlap or touch into one (fair spans stay separate:
// each is its own share); an empty span or one that adds nothing is dropped. Throws Error(invalid_argument) for
// begin < 0 or end < begin, and Error(out_of_range) when the list would exceed kMaxProtectedSpans.
void add_span(std::vector<ProtectedSpan> &spans, const ProtectedSpan &span);

// Protection lives inside the budget (DESIGN.md §9): a long chat's markup or a long system prompt can neither
// crowd out everything else nor make a sequence hold more than its budget plus the trigger's slack. The spans after
// the first may hold at most kProtectedShare of what a layer keeps beyond its observation window.
constexpr double kProtectedShare = 0.5;

// The never-evicted spans that fit among positions [0, candidates_end) (the tokens before the observation window):
// at most `all_cap` tokens in all, and at most `rest_cap` in the spans after the first (by position). Spans beyond
// that are released whole (their tokens become ordinary candidates the policy ranks), the oldest first and the first
// span (a system prompt) last. Fair spans are kept: they share what is left by design. `released` (optional)
// receives the tokens released. The result keeps the order of `spans`.
std::vector<ProtectedSpan> protection_within(const std::vector<ProtectedSpan> &spans, int64_t candidates_end,
                                             int64_t all_cap, int64_t rest_cap, int64_t *released = nullptr);

struct CompressionConfig {
  PolicyKind policy{};  // none
  double budget_fraction = 0.0;  // of the logical length at compression time, in (0, 1]; used when budget_tokens == 0
  int32_t budget_tokens = 0;     // absolute tokens per layer (average over layers for pyramid shapes)
  int32_t window = defaults::window;  // observation window; < 0: min(32, budget / 4)
  int32_t pool_kernel_prefill = defaults::pool_kernel_prefill;
  int32_t pool_kernel_decode = defaults::pool_kernel_decode;
  float alpha = defaults::alpha;
  float tau = defaults::tau;
  int32_t entropy_top_k = defaults::entropy_top_k;
  // When compression runs. 0 or defaults::interval (1024, the released default): when memory requires it, i.e. when
  // the sequence holds more than its budget plus a slack the runtime chooses (Compressor::slack_for). Any other value:
  // every `interval` tokens appended while over the budget (a fixed schedule).
  int32_t interval = defaults::interval;
  BudgetShape shape = BudgetShape::uniform;  // pyramidkv forces pyramid
  float beta = defaults::beta;
  int32_t sink = defaults::sink;  // streaming
  bool compress_after_prefill = defaults::compress_after_prefill;
  // auto only: a quality target instead of a byte target. > 0: no budget; each compression keeps, per layer, as
  // few tokens as keep the proxy loss (compress/auto_policy.hpp) at or under max_loss. 0: use the budget.
  double max_loss = 0.0;
  // Which question the session's compressions serve when a call does not say (Compressor::compress). later by default:
  // measured, a probe's queries keep what a later question needs and serve the next tokens about as well as the
  // window's (packaging/docs/quality.md, "Which question").
  Question question = Question::later;
  // auto only, under a byte budget: whether each layer may also be held at a lower precision (q8_0 beside an f32,
  // f16 or bf16 cache, where the backend reads it) when the proxy says the bytes buy more tokens there than they
  // lose to rounding (DESIGN §9 "How precisely"). false: every layer stays in the session's KV dtype.
  bool layer_precision = defaults::layer_precision;

  bool is_auto() const;
  bool quality_target() const { return is_auto() && max_loss > 0.0; }
  bool enabled() const;  // any policy but none
  bool has_budget() const { return budget_tokens > 0 || budget_fraction > 0.0; }
  // A fixed step schedule (an explicit interval) rather than the memory trigger.
  bool step_interval() const { return interval != 0 && interval != defaults::interval; }
  // What the policy reads (its row of compress/policy_table.hpp): the observation window's queries, the attention
  // sums, entropy, a replay of the context (an extra pass at each compression).
  bool needs_window_queries() const;
  bool needs_accumulated_attention() const;
  bool needs_entropy() const;
  bool needs_replay() const;
  void validate() const;  // throws Error(invalid_argument) naming the parameter
};

}  // namespace infokv
