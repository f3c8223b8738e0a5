// A session: a paged KV cache holding several sequences of one model, batched decoding over them, and the
// compression policy that keeps their caches within budget. Used by one thread at a time.
#pragma once
#include <cstdint>
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
  CompressionConfig compression;
  // Positions [0, protect_prefix) of every sequence add_sequence() makes are protected from eviction (a system
  // prompt, say); forks keep their source's spans and restored sequences the saved ones. 0: none.
  int64_t protect_prefix = 0;
  // "cpu" (default), "cuda", "cuda:N" or "auto" (src/backend/device.hpp). "cuda" without a usable GPU fails with
  // Status::no_device; "auto" uses the CPU (see src/backend/README.md). C callers set it in
  // ikv_session_options.device.
  std::string device = "cpu";
};

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
  // Appends `tokens` to `seq` like decode(), but with a compression policy on and more tokens than one chunk
  // (options().ubatch) it prefills chunk by chunk, compressing between chunks whenever the sequence holds more than
  // its budget plus a chunk, so the prompt's full cache never exists and a prompt longer than the pool can fit.
  // Compresses at the end as decode() would after a prefill. All or nothing: on any error the sequence (cache,
  // state, counters) is as before and Error is thrown.
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
  int64_t compressions(int32_t seq) const;

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
  CompressionPlan plan_compression(int32_t seq, int32_t budget_tokens);
  void apply_compression(int32_t seq, const CompressionPlan &plan);
  // plan_compression for policy auto: B tokens per layer on average, or 0 for the quality target.
  CompressionPlan plan_auto(int32_t seq, int32_t B);
  // Layer `layer` of `seq`: keys and values as f32 on the host, [n, n_kv_heads, head_dim] each.
  void layer_kv_f32(int32_t seq, int32_t layer, std::vector<float> &k, std::vector<float> &v);
  // Memory pressure, decided like an allocator: compresses the cheapest sequences (loss per freed block) until a
  // step needing `need` blocks fits, and only if it then fits; otherwise throws kv_full having changed nothing.
  void relieve_pressure(const std::map<int32_t, int32_t> &appending, int64_t need);
  int32_t budget_for(int32_t seq) const;
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
