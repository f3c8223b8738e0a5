// The one table of compression policies: name (configs, the CLI, snapshot inspect) <-> core PolicyKind <->
// C IKV_POLICY_* <-> schema enum value (config.fbs and snapshot.fbs `Policy`, which are offset by UNSPECIFIED = 0),
// and each policy's traits: what it reads, its observation window, how its scores weigh, its budget shape. Every
// conversion and every question about a policy goes through it; a test (tests/unit/compress/test_policy_table.cpp)
// checks each column against the C header and both schemas. A new policy is one row here (appended: released C and
// schema values never change), its scorer in its own file (compress/policy_<name>.cpp), its C #define, its two
// schema values and a test.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compress/policy.hpp"

namespace infokv {

// The policies, one per row of kPolicyTable below (appended: released values never change).
enum class PolicyKind : int32_t {
  none = 0, infokv = 1, snapkv = 2, h2o = 3, streaming = 4, tova = 5, pyramidkv = 6, auto_ = 7, kvzip = 8
};

struct LayerScoreInput;  // compress/scores.hpp

// A fixed policy's score for each of the first n_cand slots of a layer (higher: keep), w being its observation
// window (policy_window). One per file: compress/policy_<name>.cpp.
using PolicyScorer = std::vector<float> (*)(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand,
                                            int32_t w);
std::vector<float> infokv_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);
std::vector<float> snapkv_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);
std::vector<float> h2o_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);
std::vector<float> streaming_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);
std::vector<float> tova_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);
std::vector<float> kvzip_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);

// What a policy reads besides the cached K/V (PolicyInfo::reads): the observation window's query rows, the attention
// sums every slot receives (H2O), the predictive entropy and representation change (InfoKV), a replay of the
// context (KVzip, an extra pass at each compression).
enum PolicyReads : uint8_t { kReadsWindow = 1, kReadsAttentionSums = 2, kReadsEntropy = 4, kReadsReplay = 8 };

// The observation window a policy keeps (and scores with): the configured one (window_size), the last token only
// (TOVA), or none (StreamingLLM: its sink and recent tokens are its ranking, not a window).
enum class WindowRule : uint8_t { configured, last_token, none };

struct PolicyInfo {
  PolicyKind kind;
  const char *name;      // the config/CLI spelling; the schema enum's value name in config.fbs
  int32_t c_value;       // IKV_POLICY_*
  int16_t schema_value;  // config.fbs / snapshot.fbs Policy
  PolicyScorer scorer;   // nullptr: none (keeps everything) and auto (compress/auto_policy.cpp chooses per layer)
  uint8_t reads;         // PolicyReads
  WindowRule window;
  bool rank_only;        // its scores only rank: what eviction drops is counted in tokens, not score mass
  bool pyramid;          // its own budget shape: per-layer budgets shrinking bottom to top (whatever shape is set)
  bool global_spread;    // its own budget shape: the uniform budgets' blocks spread over the layers by its scores
                         // ranked across all layers (global_layer_budgets; its scores are comparable across layers)
};

inline constexpr std::array<PolicyInfo, 9> kPolicyTable = {{
    // kind, name, C, schema, scorer, reads, window, rank_only, pyramid, global_spread
    {PolicyKind::none, "none", 0, 1, nullptr, 0, WindowRule::configured, false, false, false},
    {PolicyKind::infokv, "infokv", 1, 2, &infokv_scores, kReadsWindow | kReadsEntropy, WindowRule::configured, false,
     false, false},
    {PolicyKind::snapkv, "snapkv", 2, 3, &snapkv_scores, kReadsWindow, WindowRule::configured, false, false, false},
    {PolicyKind::h2o, "h2o", 3, 4, &h2o_scores, kReadsAttentionSums, WindowRule::configured, false, false, false},
    {PolicyKind::streaming, "streaming", 4, 5, &streaming_scores, 0, WindowRule::none, true, false, false},
    {PolicyKind::tova, "tova", 5, 6, &tova_scores, kReadsWindow, WindowRule::last_token, false, false, false},
    {PolicyKind::pyramidkv, "pyramidkv", 6, 7, &snapkv_scores, kReadsWindow, WindowRule::configured, false, true, false},
    {PolicyKind::auto_, "auto", 7, 8, nullptr, kReadsWindow | kReadsAttentionSums | kReadsEntropy, WindowRule::configured,
     false, false, false},
    {PolicyKind::kvzip, "kvzip", 8, 9, &kvzip_scores, kReadsReplay, WindowRule::configured, false, false, true},
}};

// policy_row() indexes by the core value, and the schema values are the C values + 1 (UNSPECIFIED = 0 first):
// both hold for every row.
constexpr bool policy_table_is_dense() {
  for (size_t i = 0; i < kPolicyTable.size(); ++i)
    if (static_cast<size_t>(kPolicyTable[i].kind) != i || kPolicyTable[i].schema_value <= 0) return false;
  return true;
}
static_assert(policy_table_is_dense(), "kPolicyTable rows must be in PolicyKind order");

// The schema value that means "not set" (the runtime's default, none).
inline constexpr int16_t kPolicySchemaUnspecified = 0;

// Lookups; nullptr when nothing matches (the callers choose the status and name the field).
const PolicyInfo *policy_by_name(std::string_view name);
const PolicyInfo *policy_by_c_value(int32_t v);
const PolicyInfo *policy_by_schema_value(int32_t v);
const PolicyInfo &policy_info(PolicyKind k);  // throws Error(internal) for a value outside the table

// "none, infokv, snapkv, ..." for error messages.
std::string policy_names_list();

// The row's C or schema value, at compile time (for static_asserts next to the constants being mirrored).
constexpr const PolicyInfo &policy_row(PolicyKind k) { return kPolicyTable[static_cast<size_t>(k)]; }

}  // namespace infokv
