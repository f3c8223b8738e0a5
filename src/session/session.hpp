// A session: a paged KV cache holding several sequences of one model and batched, all-or-nothing decoding over them.
// Its compressor (compressor()) keeps their caches within budget. Used by one thread at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_forward.hpp"
#include "compress/compressor.hpp"
#include "kernels/thread_pool.hpp"
#include "kv/kv_cache.hpp"
#include "model/model.hpp"
#include "session/session_options.hpp"

namespace infokv {

// How far past its end budget a message may grow before prefill() compresses it part-way (Session::prefill).
constexpr double kPrefillCeiling = 4.0;
// Context tokens per replayed chunk (Session::replay_evidence): KVzip's 2,048 (a long chunk after its prompt reads
// as a copy of the context; 256-token chunks kept fewer needles: packaging/docs/quality.md "Context replay"), fewer
// where a chunk's query rows, held for every layer until scored, would pass kReplayRowBytes, or where the pool has
// no room for a whole chunk (down to kReplayMinChunk).
constexpr int32_t kReplayChunk = 2048;
constexpr int32_t kReplayMinChunk = 16;
constexpr int64_t kReplayRowBytes = int64_t{256} << 20;
// The probe questions whose queries stand in for a question not yet asked (Question::later, both), each a user turn
// of the model's template run after the sequence on its own: generic on purpose (packaging/docs/quality.md compares
// wordings).
constexpr const char *kProbeQuestions[] = {"Summarize the text above.", "Repeat the previous context exactly."};

namespace snapshot {
struct SessionAccess;  // src/snapshot/session_access.hpp
}  // namespace snapshot

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

class Session final : private EvidenceSource {
 public:
  Session(std::shared_ptr<const Model> model, const SessionOptions &opts);
  // With a backend made by the caller (opts.device is then only reported): for tests and custom devices.
  Session(std::shared_ptr<const Model> model, const SessionOptions &opts, std::unique_ptr<DeviceForward> backend);
  ~Session();

  const Model &model() const { return *model_; }
  const SessionOptions &options() const { return opts_; }
  // The backend's name: "cpu" or "cuda:0".
  std::string device_name() const { return device_->describe(); }
  // Where the backend computes each token of a forward piece of `from` tokens or more from that token alone
  // (DeviceOps::chunk_invariant_from), prompts are cut so that no piece is shorter than `from` when it can be
  // avoided: a message of `from` tokens or more (and each part of it that prefill_part runs) goes in chunks of
  // ubatch and the forward's pieces of those, a last one that would be short made `from` long with tokens of the one
  // before. Every token of such a message then gets the K/V and logits it gets in any other cut: they do not depend
  // on where the message began, how it was split into parts, or what shared its pieces. (A policy's attention sums
  // are added piece by piece, so their last bits do follow the cuts.) Returns `from`, or 0 where no size is promised (ubatch or
  // the entropy piece under 2 x from, or a backend without the promise): only the same cuts then give the same bits.
  int64_t cut_invariant_from() const;
  // The end of the chunk that starts at b of a message of `size` tokens, cut in chunks of at most `len` tokens as
  // above (a short last chunk lengthened to `from` from the one before).
  size_t next_cut(size_t size, size_t b, size_t len) const;
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
  // One message prefilled over several calls, as one prefill() of it would: the same chunks, the same compression
  // decisions (part-way only when memory requires it; at the end of the message as after prefill()). The engine
  // uses it to prefill a long prompt between decode steps of other sequences.
  struct PrefillCursor {
    size_t done = 0;             // tokens of the message in the cache
    bool started = false;        // the first part ran
    bool was_prefilled = false;  // the sequence had had its first decode when the message began
    int64_t end_length = 0;      // the sequence's length once the whole message is in
    bool cut_short = false;      // a chunk before the message's end was cut shorter than ubatch (the pool had less
                                 // room): the message's results are those of these cuts (see cut_invariant_from)
  };
  // Prefills the next tokens of `message` into `seq`: at most max_tokens (rounded down to whole chunks of
  // options().ubatch, at least one chunk; all that is left when that is less; a part that would leave fewer than
  // cut_invariant_from() tokens ends that many before the message's end instead). Returns how many went in; *cursor
  // then counts them. A message whose parts are multiples of ubatch computes exactly what prefill(message) computes
  // (given the same pool: a chunk the pool cannot take whole is cut shorter, as in prefill()). All or nothing per
  // call: on any error the sequence and the cursor are as before and Error is thrown; bad_state when the cursor is
  // not this sequence's (its length is not where the cursor left it) or the message is already in;
  // invalid_argument for an empty message or max_tokens 0.
  size_t prefill_part(int32_t seq, const std::vector<int32_t> &message, PrefillCursor *cursor, size_t max_tokens);
  // Logits of the latest token of `seq` [n_vocab]; throws bad_state before the first decode.
  const std::vector<float> &logits(int32_t seq) const;
  // Logits of the flagged items of the last decode, in batch order: [n_flagged * n_vocab].
  const std::vector<float> &batch_logits() const { return batch_logits_; }

  // The compressor: the policy, when it runs, protection, memory pressure and the tuning profile.
  Compressor &compressor() { return *compressor_; }
  const Compressor &compressor() const { return *compressor_; }

  // Context replay (KVzip; src/session/replay.cpp): the sequence's tokens are re-read after replay_prompt(), in
  // chunks of up to kReplayChunk at the positions after its end, and each cached slot scored by the most attention
  // any head of a re-reading query gives it. Each chunk is rolled back once scored, so the sequence is unchanged and
  // the pool needs room for one chunk only (a smaller chunk where it has less; throws kv_full, changing nothing, when
  // not even kReplayMinChunk tokens fit). Costs about as much as prefilling the sequence's tokens again.
  ReplayEvidence replay_evidence(int32_t seq) override;
  // "Repeat the previous context exactly." as a user turn of the model's chat template (plain text for a base model).
  std::vector<int32_t> replay_prompt() const;
  // The probe (src/session/replay.cpp): each of kProbeQuestions as a user turn of the model's chat template (a
  // plain-text question for a base model) run after the sequence and rolled back; their query rows per layer, in
  // turn, post-RoPE as the observation window's, at the positions after the sequence's end. Throws kv_full, changing
  // nothing, when the pool has no room for one.
  ProbeRows probe_queries(int32_t seq) override;
  std::vector<std::vector<int32_t>> probe_prompts() const;

  // Whether `seq` has logits (decoded at least once since it was made, restored or truncated).
  bool has_logits(int32_t seq) const { return state(seq).has_logits; }
  // The entropy of the logits of `seq`, which the policy records for the next token appended (0 when the policy did
  // not score entropy as they were computed); set: what a recompute with the policy off puts back (Engine).
  float pending_entropy(int32_t seq) const { return state(seq).pending_entropy; }
  void set_pending_entropy(int32_t seq, float h) { state(seq).pending_entropy = h; }

 private:
  // Per-sequence state beyond the KV cache and the compressor's. Snapshots save and restore it through
  // snapshot::SessionAccess (src/snapshot/session_access.hpp), its one other reader.
  friend struct snapshot::SessionAccess;
  struct SeqState {
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    bool has_logits = false;
    float pending_entropy = 0.0f;   // entropy of `logits`: it belongs to the next token appended
    bool prefilled = false;         // the first decode done (compression after it decided)
  };
  // Adds a sequence from a cache whose blocks the caller already took from kv() (see KvCache::adopt), its state and
  // its compression state; returns the new id. Used by snapshot restore after every check has passed.
  int32_t adopt_sequence(SeqCache &&cache, SeqState &&st, SeqCompression &&cst);
  // Host bytes of one sequence's SeqState (its map node and buffers).
  static int64_t state_bytes(const SeqState &st);

  void init(std::unique_ptr<DeviceForward> backend);
  void forward(const std::vector<BatchToken> &items, const std::vector<int32_t> &positions,
               std::vector<float> &out_logits, const std::vector<size_t> &logit_rows,
               std::map<int32_t, SeqState> &staged, std::map<int32_t, StepObservations> &steps);
  // decode()'s parts: the batch checked (counts[seq]: its tokens) and its positions; room in the pool for it (memory
  // pressure relieved or kv_full, changing nothing); after the commit, the compression the step triggers.
  std::vector<int32_t> check_batch(const std::vector<BatchToken> &batch, std::map<int32_t, int32_t> &counts) const;
  void make_room(const std::map<int32_t, int32_t> &counts);
  void after_step(const std::map<int32_t, int32_t> &counts);
  // decode() of tokens[b, e) of `seq`.
  void decode_tokens(int32_t seq, const std::vector<int32_t> &tokens, size_t b, size_t e);
  // Tokens per forward piece: ubatch, or fewer while the policy scores entropy (see cut_invariant_from).
  int32_t forward_piece() const;
  // The most tokens, at most n, that the pool can take for `seq` now.
  size_t chunk_that_fits(int32_t seq, size_t n);
  // Runs `toks` through the model after `seq` (positions after its end) in a temporary fork, hands `use` the fork's
  // id and the step's channels (every row's queries in window_q), and removes the fork: `seq` and the pool are left
  // exactly as they were, on success or error.
  void forward_rolled_back(int32_t seq, const std::vector<int32_t> &toks,
                           const std::function<void(int32_t, const StepObservations &)> &use);
  SeqState &state(int32_t seq);
  const SeqState &state(int32_t seq) const;
  // The next id no sequence has (next_id_ moves past it only once the sequence is in).
  int32_t free_id();
  // Adds sequence `id`'s state and its compressor's, both or neither.
  void insert_states(int32_t id, SeqState st, SeqCompression cst);

  std::shared_ptr<const Model> model_;
  SessionOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<DeviceForward> device_;  // the backend (CPU or CUDA); its KV store lives in kv_, released first
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Compressor> compressor_;  // refers to kv_ and pool_: made after them, destroyed before
  std::map<int32_t, SeqState> seqs_;
  int32_t next_id_ = 0;
  int32_t prefill_seq_ = -1;  // during prefill(): the one sequence memory pressure may compress
  std::vector<float> batch_logits_;
};

}  // namespace infokv
