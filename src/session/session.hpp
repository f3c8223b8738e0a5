// A session: a paged KV cache holding several sequences of one model, batched decoding over them, and the
// compression policy that keeps their caches within budget. Used by one thread at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_forward.hpp"
#include "compress/auto_policy.hpp"
#include "compress/policy.hpp"
#include "compress/profile.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kv/kv_cache.hpp"
#include "model/model.hpp"

namespace infokv {

struct SessionOptions {
  int32_t n_threads = defaults::n_threads;  // 0: available cores
  KvDtype kv_dtype = KvDtype::f16;
  int32_t block_size = defaults::block_size;
  int64_t kv_pool_blocks = 0;    // pool size in blocks (all layers); 0: from kv_pool_bytes or the default
  int64_t kv_pool_bytes = 0;     // pool size in bytes; 0: kv_pool_fraction or the default
  // Pool size as a fraction of the device's free memory once the weights are loaded (CUDA: cudaMemGetInfo; CPU:
  // available physical memory), at most 4 x the trained context. 0: the default, which is 0.8 on CUDA, and on the
  // CPU 4 x the trained context capped at 1 GiB (lazily committed).
  double kv_pool_fraction = 0;
  int32_t ubatch = defaults::ubatch;  // tokens per forward chunk
  // Most sequences the session holds at once, in [1, 2^20]. Each costs host memory outside the pool (block tables,
  // logits and, with a policy, the observation window: 2.3 MiB for SmolLM2-135M), so an embedder facing untrusted
  // callers bounds it; add_sequence, fork_sequence and restore beyond it throw out_of_range and change nothing.
  int32_t max_sequences = defaults::max_sequences;
  // The most host memory the session may commit: its sequences' state outside the pool (every shared observation
  // window counted as if copied) and, on the CPU, the KV pool; fork_sequence past it throws out_of_memory. 0: the
  // machine's physical memory. Not in the C API (tests set it).
  int64_t host_memory_limit = 0;
  CompressionConfig compression;
  // Positions [0, protect_prefix) of every sequence add_sequence() makes are protected from eviction (a system
  // prompt, say); forks keep their source's spans and restored sequences the saved ones. 0: none.
  int64_t protect_prefix = 0;
  // "cpu" (default), "cuda", "cuda:N" or "auto" (src/backend/device.hpp). "cuda" without a usable GPU fails with
  // Status::no_device; "auto" uses the CPU (see src/backend/README.md). C callers set it in
  // ikv_session_options.device.
  std::string device = "cpu";
};

// The slack of the memory trigger as a share of the budget (Session::slack_for), and how far past its end budget a
// message may grow before prefill() compresses it part-way (Session::prefill).
constexpr double kSlackShare = 0.25;
constexpr double kPrefillCeiling = 4.0;
// Context tokens per replayed chunk (Session::replay_evidence).
constexpr int32_t kReplayChunk = 256;
// The probe questions whose queries stand in for a question not yet asked (Question::later, both), each a user turn
// of the model's template run after the sequence on its own: generic on purpose (packaging/docs/quality.md compares
// wordings).
constexpr const char *kProbeQuestions[] = {"Summarize the text above.", "Repeat the previous context exactly."};

struct BatchToken {
  int32_t seq = 0;
  int32_t token = 0;
  bool logits = false;  // return this item's logits in batch_logits() (the last item of each sequence always has them)
};

struct SeqInfo {
  int64_t length = 0;
  std::vector<int32_t> kept_per_layer;
  int64_t bytes = 0;
  int64_t blocks = 0;
  // What the sequence would hold uncompressed: every position of its logical length in every layer, in whole
  // blocks, as `bytes` counts them.
  int64_t uncompressed_bytes = 0;
};

class Session {
 public:
  Session(std::shared_ptr<const Model> model, const SessionOptions &opts);
  // With a backend made by the caller (opts.device is then only reported): for tests and custom devices.
  Session(std::shared_ptr<const Model> model, const SessionOptions &opts, std::unique_ptr<DeviceForward> backend);
  ~Session();

  const Model &model() const { return *model_; }
  const SessionOptions &options() const { return opts_; }
  // The backend's name: "cpu" or "cuda:0".
  std::string device_name() const { return device_->describe(); }
  KvCache &kv() { return *kv_; }
  const KvCache &kv() const { return *kv_; }
  // kv().stats() with host_bytes also counting the per-sequence state the session keeps (token histories, logits,
  // protected spans).
  KvStats kv_stats() const;
  int64_t sequence_count() const { return static_cast<int64_t>(seqs_.size()); }
  // Throws Error(out_of_range) unless n more sequences fit under options().max_sequences.
  void check_room_for_sequences(int64_t n) const;
  // Host memory the sequences hold now (kv_stats().host_bytes) plus what copying every window they share would add.
  int64_t committed_host_bytes() const;
  // Throws Error(out_of_memory) unless a fork of src, at its worst case (every shared window copied), keeps
  // committed_host_bytes() (plus the KV pool on the CPU) within options().host_memory_limit (0: the machine's
  // physical memory).
  void check_host_memory_for_fork(int32_t src) const;

  int32_t add_sequence();                   // a new empty sequence; returns its id
  void remove_sequence(int32_t seq);
  int32_t fork_sequence(int32_t src);       // shares src's cache; returns the new id
  void truncate(int32_t seq, int64_t length);
  void remove_range(int32_t seq, int64_t begin, int64_t end);  // drops cached positions [begin, end); length unchanged
  bool has_sequence(int32_t seq) const { return kv_->has(seq); }
  SeqInfo info(int32_t seq) const;
  const std::vector<int32_t> &tokens(int32_t seq) const;  // every token appended (logical history)

  // Appends the batch's tokens to their sequences and runs the model. All or nothing: on any error (bad token,
  // unknown sequence, KV full) the caches, lengths and logits are exactly as before and Error is thrown.
  void decode(const std::vector<BatchToken> &batch);
  // Appends `tokens` to `seq` like decode(), as one message: with a compression policy on it is compressed once at
  // the end (the message's last tokens, a question or a turn's end, are the best evidence a compressor gets), and
  // in between only when memory requires it: when the sequence would hold more than kPrefillCeiling x its budget at
  // the end (the process peak stays bounded), or when the pool cannot take the next chunk. Chunks are
  // options().ubatch tokens, or fewer when the pool has less room (down to one token); a step fails with KV full
  // only when not one more token fits after compressing this sequence to its budget. All or nothing: on any error
  // the sequence (cache, state, counters) is as before and Error is thrown.
  void prefill(int32_t seq, const std::vector<int32_t> &tokens);
  // Logits of the latest token of `seq` [n_vocab]; throws bad_state before the first decode.
  const std::vector<float> &logits(int32_t seq) const;
  // Logits of the flagged items of the last decode, in batch order: [n_flagged * n_vocab].
  const std::vector<float> &batch_logits() const { return batch_logits_; }

  // Compression. set_compression() validates and replaces the configuration (options().compression reads it);
  // protect() marks a span of positions; compress() runs the policy now (to `budget_tokens` per layer when > 0,
  // otherwise the configured budget).
  void set_compression(const CompressionConfig &c);
  void protect(int32_t seq, const ProtectedSpan &span);
  const std::vector<ProtectedSpan> &protected_spans(int32_t seq) const;
  // Replaces the sequence's spans (as returned by protected_spans): undoes protect() calls of a step that failed.
  void set_protected_spans(int32_t seq, std::vector<ProtectedSpan> spans);
  void compress(int32_t seq, int32_t budget_tokens = 0);
  // The same for the question `q` (compress() serves options().compression.question).
  void compress(int32_t seq, int32_t budget_tokens, Question q);
  int64_t compressions(int32_t seq) const;

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
  // Tokens kept per layer: the mean over layers (what the memory trigger compares) and the largest layer (what the
  // fixed schedule and memory pressure compare).
  double mean_kept(int32_t seq) const;
  int32_t max_kept(int32_t seq) const;
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
  // Never-evicted tokens of `seq` (its protected spans within its length).
  int64_t protected_tokens(int32_t seq) const;

  // Tuning profile (src/compress/profile.hpp). set_profile: the session's byte-budget auto compressions start from
  // the profile's layer shape (each layer's floor is kAutoLayerFloor x budget x its share clamped to [0.5, 1.5]) and
  // refine it. Throws Error(wrong_model) when its fingerprints or layer count are not this model's, and
  // Error(bad_config) when it is invalid; the session is then unchanged. Without one, the first auto compression
  // under a byte budget starts an empty profile that only records (profile_guides() false), so that what auto did
  // can be saved. profile(): nullptr before either.
  void set_profile(const TuningProfile &p);
  const TuningProfile *profile() const { return profile_ ? &*profile_ : nullptr; }
  bool profile_guides() const { return profile_guides_; }

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
    double probe_seconds = 0;
  };
  // A sequence that memory pressure could compress: what the pool would gain (blocks, net of the step's own needs
  // for it) and the estimated loss per block gained.
  struct PressureCandidate {
    int32_t seq = 0;
    CompressionPlan plan;
    int64_t blocks = 0;
    double cost_per_block = 0;
  };
  // The sequences over their budget whose compression would free blocks, cheapest loss per block first, for a step
  // that appends appending[seq] tokens to each sequence (none: an empty map). Changes nothing.
  std::vector<PressureCandidate> pressure_candidates(const std::map<int32_t, int32_t> &appending = {});
  // pressure_candidates()'s estimate for one sequence, for a step that appends nothing: what compressing `seq` to
  // its budget now would free (blocks) and its loss per freed block. blocks and cost_per_block are 0 (plan empty)
  // when the sequence is at or under its budget, the policy is 'none', or compressing it would free nothing.
  // Changes nothing. Throws not_found for an unknown sequence.
  PressureCandidate pressure_estimate(int32_t seq);

  // Context replay (KVzip; src/session/replay.cpp): the sequence's tokens are re-read after replay_prompt(), in
  // chunks of kReplayChunk at the positions after its end, and each cached slot scored by the most attention any
  // head of a re-reading query gives it. Each chunk is rolled back once scored, so the sequence is unchanged and the
  // pool needs room for one chunk only (throws kv_full otherwise, changing nothing). Costs about as much as
  // prefilling the sequence's tokens again.
  struct ReplayEvidence {
    std::vector<std::vector<float>> score;  // [layer][slot]
    int64_t tokens = 0;                     // tokens run through the model, prompts included
    double seconds = 0;
  };
  ReplayEvidence replay_evidence(int32_t seq);
  // "Repeat the previous context exactly." as a user turn of the model's chat template (plain text for a base model).
  std::vector<int32_t> replay_prompt() const;
  // The probe (src/session/replay.cpp): each of kProbeQuestions as a user turn of the model's chat template (a
  // plain-text question for a base model) run after the sequence and rolled back; their query rows per layer, in
  // turn, post-RoPE as the observation window's, at the positions after the sequence's end. Throws kv_full, changing
  // nothing, when the pool has no room for one.
  struct ProbeRows {
    std::vector<std::vector<float>> q;  // [layer]: rows of n_heads * head_dim, in order
    std::vector<int32_t> pos;
    double seconds = 0;
  };
  ProbeRows probe_queries(int32_t seq);
  // The query rows a compression for question q reads, per layer (CompressionPlan::question says what was served).
  struct EvidenceRows {
    std::vector<std::vector<float>> q;
    std::vector<int32_t> pos;
    int32_t probe = 0;  // the last `probe` rows are the probe's
    bool own = false;   // false: read the sequence's observation window as it is
  };
  std::vector<std::vector<int32_t>> probe_prompts() const;

  // Per-sequence state beyond the KV cache. Public so that snapshots (src/snapshot/) can save and restore it.
  struct SeqState {
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    bool has_logits = false;
    float pending_entropy = 0.0f;   // entropy of `logits`: it belongs to the next token appended
    int64_t since_compress = 0;     // tokens appended since the last compression
    bool prefilled = false;         // compression after the first decode done
    int64_t n_compressions = 0;
    std::vector<ProtectedSpan> spans;
    AutoReport auto_report;         // policy auto: its choice at the latest compression (empty before one)
    // Protected tokens released so that protection stays within the budget (kProtectedShare), oldest spans first,
    // since the sequence was made or restored (not saved in snapshots: the saved spans already lack them).
    int64_t protected_released = 0;
    // What the latest compression served (Question::next when a later question was asked for but the pool had no
    // room for the probe) and what its probe cost; not saved in snapshots (a restored sequence reports next, 0).
    Question question = Question::next;
    double probe_seconds = 0;
  };
  const SeqState &seq_state(int32_t seq) const { return state(seq); }
  // Adds a sequence from a cache whose blocks the caller already took from kv() (see KvCache::adopt) and its
  // state; returns the new id. Used by snapshot restore after every check has passed.
  int32_t adopt_sequence(SeqCache &&cache, SeqState &&st);

 private:
  void init(std::unique_ptr<DeviceForward> backend);
  void forward(const std::vector<BatchToken> &items, const std::vector<int32_t> &positions,
               std::vector<float> &out_logits, const std::vector<size_t> &logit_rows,
               std::map<int32_t, SeqState> &staged, std::map<int32_t, StepChannels> &steps);
  void maybe_compress_after(const std::vector<int32_t> &seqs);
  // decode() of tokens[b, e) of `seq`.
  void decode_tokens(int32_t seq, const std::vector<int32_t> &tokens, size_t b, size_t e);
  // The most tokens, at most n, that the pool can take for `seq` now.
  size_t chunk_that_fits(int32_t seq, size_t n);
  CompressionPlan plan_compression(int32_t seq, int32_t budget_tokens, Question q);
  EvidenceRows evidence_rows(int32_t seq, Question q, Question *served, double *seconds);
  // Runs `toks` through the model after `seq` (positions after its end) in a temporary fork, hands `use` the fork's
  // id and the step's channels (every row's queries in window_q), and removes the fork: `seq` and the pool are left
  // exactly as they were, on success or error.
  void forward_rolled_back(int32_t seq, const std::vector<int32_t> &toks,
                           const std::function<void(int32_t, const StepChannels &)> &use);
  // The protected spans a compression to `budget` tokens per layer keeps (protection_within_budget).
  std::vector<ProtectedSpan> spans_for_compression(int32_t seq, int32_t budget, int64_t *released) const;
  void apply_compression(int32_t seq, const CompressionPlan &plan);
  // plan_compression for policy auto: B tokens per layer on average (0: none), max_loss a quality target (0: none);
  // with both, as few tokens as hold max_loss and never more blocks than B holds.
  CompressionPlan plan_auto(int32_t seq, int32_t B, double max_loss, const EvidenceRows &rows);
  // Layer `layer` of `seq`: keys and values as f32 on the host, [n, n_kv_heads, head_dim] each.
  void layer_kv_f32(int32_t seq, int32_t layer, std::vector<float> &k, std::vector<float> &v);
  // Memory pressure, decided like an allocator: compresses the cheapest sequences (loss per freed block) until a
  // step needing `need` blocks fits, and only if it then fits; otherwise throws kv_full having changed nothing.
  void relieve_pressure(const std::map<int32_t, int32_t> &appending, int64_t need);
  int32_t budget_for(int32_t seq) const;
  // Under a quality target: the growth since the latest compression that triggers the next.
  int64_t quality_slack(int32_t seq) const;
  // Compresses `seq` to `budget` tokens per layer, going on (false) when a compaction finds no block for its
  // copies (KV full).
  bool try_compress(int32_t seq, int32_t budget);
  int32_t window_capacity() const;
  SeqState &state(int32_t seq);
  const SeqState &state(int32_t seq) const;
  // One sequence's pressure candidate (false when it is at or under its budget or compressing it frees nothing).
  bool pressure_candidate(int32_t seq, int32_t n_new, PressureCandidate *out);

  std::shared_ptr<const Model> model_;
  SessionOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<DeviceForward> device_;  // the backend (CPU or CUDA); its KV store lives in kv_, released first
  std::unique_ptr<KvCache> kv_;
  std::map<int32_t, SeqState> seqs_;
  int32_t next_id_ = 0;
  int32_t prefill_seq_ = -1;  // during prefill(): the one sequence memory pressure may compress
  std::vector<float> batch_logits_;
  std::optional<TuningProfile> profile_;
  bool profile_guides_ = false;  // set_profile() was called: plan_auto takes its floors from the profile
};

}  // namespace infokv
