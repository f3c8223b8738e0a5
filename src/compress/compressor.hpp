// The compressor (DESIGN.md §4, §9): decides when a sequence's cache is compressed, plans what each layer keeps
// under the configured policy, compacts the cache so that the memory returns to the pool, and decides which
// sequences give up blocks when the pool is full. A Session owns one: the session runs sequences and batches and
// asks the compressor after every step, and for room before a step that does not fit.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "compress/auto_policy.hpp"
#include "compress/policy.hpp"
#include "compress/profile.hpp"
#include "compress/scores.hpp"
#include "kernels/thread_pool.hpp"
#include "kv/kv_cache.hpp"
#include "model/model.hpp"

namespace infokv {

// The slack of the memory trigger as a share of the budget (Compressor::slack_for).
constexpr double kSlackShare = 0.25;

// Query rows of a question not yet asked: the probe's (src/session/replay.cpp), per layer, post-RoPE as the
// observation window's, at the positions after the sequence's end.
struct ProbeRows {
  std::vector<std::vector<float>> q;  // [layer]: rows of n_heads * head_dim, in order
  std::vector<int32_t> pos;
  double seconds = 0;
};

// Context replay (KVzip): each cached slot's score, the most attention any head of a re-reading query gives it.
struct ReplayEvidence {
  std::vector<std::vector<float>> score;  // [layer][slot]
  int64_t tokens = 0;                     // tokens run through the model, prompts included
  double seconds = 0;
};

// What the compressor cannot make itself: evidence that needs forward passes, run by the session that owns it.
// Both leave the sequence and the pool as they were, and throw kv_full (changing nothing) without room.
class EvidenceSource {
 public:
  virtual ProbeRows probe_queries(int32_t seq) = 0;
  virtual ReplayEvidence replay_evidence(int32_t seq) = 0;

 protected:
  ~EvidenceSource() = default;
};

// One sequence's compression state.
struct SeqCompression {
  int64_t since_compress = 0;  // tokens appended since the last compression
  int64_t n_compressions = 0;
  std::vector<ProtectedSpan> spans;
  AutoReport auto_report;      // policy auto: its choice at the latest compression (empty before one)
  // Protected tokens released so that protection stays within the budget (kProtectedShare), oldest spans first,
  // since the sequence was made or restored (not saved in snapshots: the saved spans already lack them).
  int64_t protected_released = 0;
  // What the latest compression served (Question::next when a later question was asked for but the pool had no
  // room for the probe) and what its probe cost; not saved in snapshots (a restored sequence reports next, 0).
  Question question = Question::next;
  double probe_seconds = 0;
};

// Who asked for a compression: a caller, now (ikv_seq_compress, an eval), or the runtime (the memory trigger, memory
// pressure, the scheduler) inside a step whose latency someone is waiting on, and again each time the sequence
// outgrows its slack. auto spends a pass over the context on its evidence only on a request (plan_auto_replay).
enum class Occasion : int32_t { request = 0, automatic = 1 };

// What compressing one sequence to its budget would do, planned without changing anything.
struct CompressionPlan {
  std::vector<std::vector<int32_t>> keep;  // [layer]: slot indices kept, ascending
  bool evicts = false;                     // some layer drops a slot
  double evicted_share = 0;                // the policy's score mass dropped, mean over layers (0..1)
  AutoReport report;                       // policy auto: what it chose, per layer
  // Protection within the budget: the spans the compression keeps (the sequence's, less those released because
  // protected tokens would have taken more than their share of the budget) and the tokens released.
  std::vector<ProtectedSpan> spans;
  int64_t released_tokens = 0;
  Question question = Question::next;  // what the evidence served
  double probe_seconds = 0;            // what that evidence took (the probe's run, and auto's context replay)
  // [layer]: the dtype each layer is held in afterwards, where auto chose a lower precision for some layer (empty:
  // every layer keeps its own).
  std::vector<KvDtype> dtype;
  // Whether applying the plan changes the cache: a slot dropped or a layer converted.
  bool changes(const KvCache &kv, int32_t seq) const;
};

// A sequence that memory pressure could compress: what the pool would gain (blocks, net of the step's own needs
// for it) and the estimated loss per block gained.
struct PressureCandidate {
  int32_t seq = 0;
  CompressionPlan plan;
  int64_t blocks = 0;
  double cost_per_block = 0;
};

class Compressor {
 public:
  // kv, the pool and the evidence source outlive the compressor; window_probs computes the observation window's
  // attention on the device that holds the cache. Throws bad_config for an invalid configuration.
  Compressor(const Model &model, KvCache &kv, ThreadPool &pool, EvidenceSource &evidence, WindowProbsFn window_probs,
             const CompressionConfig &config);

  // The configuration in force. set_config() validates and replaces it.
  const CompressionConfig &config() const { return config_; }
  void set_config(const CompressionConfig &c);

  // The sequences it keeps state for (the session's, by the same ids).
  void remove(int32_t seq) { seqs_.erase(seq); }
  const SeqCompression &state(int32_t seq) const;
  // Replaces the state of `seq` (adding it if new): a fork's copy, a restore, the undo of a failed message.
  void set_state(int32_t seq, SeqCompression st);
  // Host bytes of the state of `seq` (its map node and spans).
  int64_t host_bytes(int32_t seq) const;

  // Protection: protect() marks a span of positions; set_spans() replaces the sequence's spans (as spans() returns
  // them), undoing protect() calls of a step that failed.
  void protect(int32_t seq, const ProtectedSpan &span);
  const std::vector<ProtectedSpan> &spans(int32_t seq) const { return state(seq).spans; }
  void set_spans(int32_t seq, std::vector<ProtectedSpan> spans);
  // Never-evicted tokens of `seq` (its protected spans within its length).
  int64_t protected_tokens(int32_t seq) const;
  int64_t compressions(int32_t seq) const { return state(seq).n_compressions; }

  // Runs the policy now, to `budget_tokens` per layer when > 0, otherwise the configured budget, serving question
  // `q` (config().question when not given), on the given occasion (a caller's request unless said). Throws
  // bad_state when the policy is 'none' and kv_full, changing nothing, when copy-on-write of shared blocks finds no
  // free block.
  void compress(int32_t seq, int32_t budget_tokens = 0) { compress(seq, budget_tokens, config_.question); }
  void compress(int32_t seq, int32_t budget_tokens, Question q, Occasion occasion = Occasion::request);
  // An automatic compress() (Occasion::automatic, the configured question), going on (false) when the compaction
  // finds no block for its copies (KV full).
  bool try_compress(int32_t seq, int32_t budget_tokens);

  // When compression runs (DESIGN.md §9, "When"). With the memory trigger (CompressionConfig::step_interval()
  // false, the default) a sequence is compressed back to its budget as soon as it holds, on average over layers,
  // more than budget + slack_for(budget) tokens: after every decode step, every message (prefill) and every chat
  // turn. Under a quality target alone (max_loss, no budget) it is compressed once it has grown by
  // slack_for(what it kept) since its latest compression.
  // The slack: a quarter of the budget (kSlackShare), at least one block, in whole blocks. Compression costs about
  // as much as decoding 1/40 of the tokens it scores (SmolLM2-135M, 2 threads), so a slack of B/4 keeps its cost
  // near 10% of decode time while what a sequence holds never exceeds 1.25 x its budget.
  int32_t slack_for(int32_t budget_tokens) const;
  // The budget (tokens per layer, mean over layers) of a sequence whose logical length is `length`: a token budget
  // as it is, a fraction of `length`; under a quality target alone, the observation window.
  int32_t budget_at(int64_t length) const;
  int32_t budget_for(int32_t seq) const { return budget_at(kv_.seq(seq).length); }
  // Tokens kept per layer: the mean over layers (what the memory trigger compares) and the largest layer (what the
  // fixed schedule and memory pressure compare). A layer held at a lower precision than the cache's dtype counts its
  // tokens by their bytes (a q8_0 token beside an f16 cache: 34/64 of one), so that a budget stays one of bytes.
  double mean_kept(int32_t seq) const;
  int32_t max_kept(int32_t seq) const;
  double held_tokens(const LayerSlots &L) const;
  // Whether the trigger (memory or the fixed interval) asks for a compression of `seq` now.
  bool compression_due(int32_t seq) const;
  // The fewest tokens that can be appended to `seq` before its next scheduled compression (0: it is due now).
  int64_t tokens_until_compression(int32_t seq) const;
  // What the trigger holds `seq` to now, in tokens per layer (mean over layers): its budget and the slack above it
  // (with an explicit interval, the interval). Without a policy both are 0; under a quality target alone the budget
  // is 0 and the slack is the growth since the latest compression that triggers the next.
  struct Bound {
    int64_t budget = 0;
    int64_t slack = 0;
  };
  Bound bound(int32_t seq) const;
  // Observation-window rows kept per layer: max(defaults::max_window, the configured window).
  int32_t window_capacity() const;
  // How many of the latest observation-window rows of `seq` its next scheduled compression reads that it will not
  // have decoded anew by then (what a snapshot must keep for compression to go on as if uninterrupted).
  int64_t window_rows_needed(int32_t seq) const;

  // After a committed step that appended counts[seq] tokens: counts them, then compresses each of `due` (the
  // session's choice: a first decode, or compression_due()) that holds more than its budget in some layer. A
  // compaction that finds no block for its copies leaves that sequence over budget with its count kept, so the
  // next step tries again.
  void appended(int32_t seq, int64_t n) { state_mut(seq).since_compress += n; }
  // Records a committed step's observations of `seq` in its slot channels (compress/channels.hpp): adds the
  // attention sums to every slot they cover and sets the entropy and representation change of the step's new slots
  // (the last of each layer). Allocates nothing: it cannot fail once the step's slots are appended.
  void observe(int32_t seq, const StepObservations &obs);
  void compress_over_budget(const std::vector<int32_t> &due);

  // Memory pressure, decided like an allocator. pressure_candidates(): the sequences over their budget whose
  // compression would free blocks, cheapest loss per freed block first, for a step that appends appending[seq]
  // tokens to each (only >= 0: that sequence alone). Changes nothing.
  std::vector<PressureCandidate> pressure_candidates(const std::map<int32_t, int32_t> &appending = {}, int32_t only = -1);
  // The estimate for one sequence and a step that appends nothing: what compressing `seq` to its budget now would
  // free and its loss per freed block; blocks and cost_per_block are 0 (plan empty) when it is at or under its
  // budget, the policy is 'none', or compressing it would free nothing. Throws not_found for an unknown sequence.
  PressureCandidate pressure_estimate(int32_t seq);
  // Compresses the cheapest candidates until a step needing `need` blocks fits, and only if it then fits; otherwise
  // throws kv_full having changed nothing.
  void relieve_pressure(const std::map<int32_t, int32_t> &appending, int64_t need, int32_t only = -1);
  // What compressing `seq` to `budget_tokens` (> 0) serving `q` would free now and its loss per freed block, for a
  // scheduler weighing compression against other ways of finding memory (src/engine). blocks is 0 when it would
  // free nothing. Throws bad_state when the policy is 'none', not_found for an unknown sequence.
  PressureCandidate estimate(int32_t seq, int32_t budget_tokens, Question q);
  // Applies a plan made by estimate() (or pressure_estimate()) for the sequence as it still is: nothing may have
  // changed it since. Throws kv_full, changing nothing, when copy-on-write finds no free block.
  void apply_plan(int32_t seq, const CompressionPlan &plan) { apply(seq, plan); }

  // Tuning profile (src/compress/profile.hpp). set_profile: byte-budget auto compressions start from the profile's
  // layer shape (each layer's floor is kAutoLayerFloor x budget x its share clamped to [0.5, 1.5]) and refine it.
  // Throws Error(wrong_model) when its fingerprints or layer count are not this model's, and Error(bad_config) when
  // it is invalid; nothing changes then. Without one, the first auto compression under a byte budget starts an empty
  // profile that only records (profile_guides() false), so that what auto did can be saved. profile(): nullptr
  // before either.
  void set_profile(const TuningProfile &p);
  const TuningProfile *profile() const { return profile_ ? &*profile_ : nullptr; }
  bool profile_guides() const { return profile_guides_; }

 private:
  // The query rows a compression for question q reads, per layer.
  struct EvidenceRows {
    std::vector<std::vector<float>> q;
    std::vector<int32_t> pos;
    int32_t probe = 0;  // the last `probe` rows are the probe's
    bool own = false;   // false: read the sequence's observation window as it is
  };
  SeqCompression &state_mut(int32_t seq);
  // The window a quality target alone keeps: the configured one, or defaults::max_window.
  int32_t quality_window() const;
  CompressionPlan plan(int32_t seq, int32_t budget_tokens, Question q, Occasion occasion);
  // plan() for a policy of the table (not auto) under B tokens per layer; `replay` the context replay when the
  // policy reads it. Every layer's eviction cost by the policy's measure goes to *layer_share when given. With
  // with_probe, each layer ranks by rank_max of the policy's scores and SnapKV's over `rows` (a probe's).
  CompressionPlan plan_fixed(const CompressionConfig &c, int32_t seq, int32_t B, const EvidenceRows &rows,
                             const ReplayEvidence *replay, std::vector<double> *layer_share, bool with_probe = false);
  // plan() for auto on a request for a later question under a byte budget, when the pool has room for the context
  // replay: kvzip's spread (the blocks go to the layers whose tokens the replay ranks highest anywhere), and in each
  // layer what either the replay or the probe's attention ranks high (the replay alone where the probe finds no
  // room); reported as auto's, evidence replay. Returns false (nothing planned) when the replay finds no room.
  bool plan_auto_replay(int32_t seq, int32_t B, CompressionPlan *out);
  // plan() for policy auto: B tokens per layer on average (0: none), max_loss a quality target (0: none); with both,
  // as few tokens as hold max_loss and never more blocks than B holds.
  CompressionPlan plan_auto(int32_t seq, int32_t B, double max_loss, const EvidenceRows &rows);
  EvidenceRows evidence_rows(int32_t seq, Question q, Question *served, double *seconds);
  LayerScoreInput layer_input(int32_t seq, int32_t layer, const std::vector<ProtectedSpan> &spans,
                              const EvidenceRows &rows) const;
  // The protected spans a compression to `budget` tokens per layer keeps (protection_within).
  std::vector<ProtectedSpan> spans_for_compression(int32_t seq, int32_t budget, int64_t *released) const;
  void apply(int32_t seq, const CompressionPlan &plan);
  // Layer `layer` of `seq`: keys and values as f32 on the host, [n, n_kv_heads, head_dim] each.
  void layer_kv_f32(int32_t seq, int32_t layer, std::vector<float> &k, std::vector<float> &v) const;
  // k and v (layer_kv_f32's) as dtype dt would hold them: rounded to it and back (keys less the layer's K bias where
  // dt stores them so).
  void round_layer(int32_t layer, KvDtype dt, const std::vector<float> &k, const std::vector<float> &v,
                   std::vector<float> &k_low, std::vector<float> &v_low) const;
  // Under a quality target: the growth since the latest compression that triggers the next.
  int64_t quality_slack(int32_t seq) const;
  bool pressure_candidate(int32_t seq, int32_t n_new, PressureCandidate *out);

  const Model &model_;
  KvCache &kv_;
  ThreadPool &pool_;
  EvidenceSource &evidence_;
  WindowProbsFn window_probs_;
  CompressionConfig config_;
  std::map<int32_t, SeqCompression> seqs_;
  std::optional<TuningProfile> profile_;
  bool profile_guides_ = false;  // set_profile() was called: plan_auto takes its floors from the profile
};

}  // namespace infokv
