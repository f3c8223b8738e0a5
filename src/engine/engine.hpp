// The engine: many conversations over one session's pool, decoded in continuous batches, none failed while memory
// can be found (DESIGN.md §9, "Where, and whether to recompute"). When a step does not fit the pool, each candidate
// victim is compressed further, moved out (a snapshot in the spill directory) or dropped and recomputed from its
// tokens when it runs again, whichever a cost model measured on this machine says is cheapest; every decision is
// reported with its estimated and measured cost. Used by one thread at a time.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/prefix_cache.hpp"
#include "sampling/sampler.hpp"
#include "session/session.hpp"

namespace infokv {
class SpillDir;

// What the engine does when a step does not fit the pool.
enum class Strategy : int32_t {
  automatic = 0,  // the cheapest of compress, move and recompute per victim (the default)
  fail = 1,       // fail the turn that does not fit (llama.cpp's server)
  recompute = 2,  // drop a victim's cache and prefill its tokens again when it runs (vLLM V1's preemption)
  move = 3,       // move a victim's cache to the spill directory and back (host/disk offload)
  compress = 4,   // compress victims further, down to min_keep of their length, then fail
};
const char *strategy_name(Strategy s);
// Throws Error(invalid_argument) naming the accepted values.
Strategy parse_strategy(const std::string &name);

// What was done to a conversation to make room (or to bring it back).
enum class Action : int32_t { compress = 0, move = 1, recompute = 2, fail = 3 };
const char *action_name(Action a);

struct EngineOptions {
  SessionOptions session;  // the pool, threads and compression configuration of the one session
  Strategy strategy = Strategy::automatic;
  // Where moved conversations' snapshots go. Empty: a private directory under the system's temp dir, made at start
  // and removed with the engine.
  std::string spill_dir;
  // Most turns generating in one batch (0: as many as the pool holds).
  int32_t max_batch = 0;
  // Prefill per step: kPrefillChunkPerStep (the default) for the session's prefill chunk (ubatch), 0 for no limit.
  // A step continues the prompts it began earlier and admits queued turns (by priority; within one, prompts that
  // fit in this limit before longer ones, except that a longer one passed over in the last step goes first; then by
  // arrival) until this many tokens have been prefilled (prompts and recomputes; a prefix-cache hit or a restored snapshot counts only
  // what is prefilled). A prompt longer than what is left goes in by whole prefill chunks (at least one), the rest
  // in the next steps between the running turns' tokens, so one long prompt delays the others by about one chunk
  // per step, not by its whole prefill. Turns arriving together start a step or more apart: the first answers
  // begin sooner and running turns keep streaming (8 two-turn chats arriving at once on SmolLM2, infokv serve:
  // first-turn time to first token 3.3-3.6 s -> 2.2 s, a stream's longest stall p95 1.0-1.1 s -> 0.5 s, the same
  // throughput; packaging/docs/server.md). A turn's own prefill and decode are the same computation whichever
  // steps carry it (its prompt is cut at whole chunks, the chunks a single prefill uses); what can differ under
  // memory pressure is what the strategy does to make room meanwhile (a compression there changes what a turn
  // keeps). Under a stream of higher-priority arrivals, lower-priority turns wait for steps with prefill to spare;
  // a short turn arriving behind a long prompt starts within a step or two instead of after all of its chunks, and
  // the long prompt still gets at least every other step's prefill.
  static constexpr int32_t kPrefillChunkPerStep = -1;
  int32_t max_prefill_tokens = kPrefillChunkPerStep;
  // Compression never keeps fewer than this share of a conversation's tokens (mean over layers).
  double min_keep = 0.25;
  // automatic: a compression is preferred to moving or recomputing when its proxy loss (the share of the policy's
  // attention mass it evicts, mean over layers, 0..1) is at most this.
  double max_loss = 0.05;
  // The prefix cache: off unless enabled. A new conversation whose first turn starts with a cached prefix starts
  // from its snapshot; each turn's prompt is saved at its end, its last whole prefill chunk and its save points (Turn),
  // in each tier configured (the engine sets PrefixCacheOptions::boundary and exact_from from the session).
  bool prefix_cache = false;
  PrefixCacheOptions prefix;
  // Skip the start-up measurement (tests): use these rates instead. 0: measure.
  double assume_prefill_tokens_per_s = 0;
  double assume_disk_bytes_per_s = 0;
  double assume_compress_tokens_per_s = 0;
};

// One decision, as it was made and as it turned out.
struct Decision {
  int64_t conversation = 0;
  int64_t step = 0;
  Action action = Action::fail;
  std::string why;
  int64_t blocks = 0;          // blocks it freed (estimated for compress before, measured after)
  int64_t tokens = 0;          // the conversation's length then
  double est_seconds = 0;      // move: out and back; recompute: the prefill when it runs again; compress: 0
  double est_loss = 0;         // compress: its proxy loss (evicted attention share)
  double measured_seconds = -1;  // move: out, then out + back; recompute: -1 until recomputed; compress: its time
};

struct EngineStats {
  int64_t steps = 0;
  int64_t decoded_tokens = 0;
  int64_t prefilled_tokens = 0;
  int64_t compressions = 0, moves = 0, recomputes = 0, failures = 0;
  int64_t bytes_moved = 0;      // written to and read back from the spill directory
  int64_t recomputed_tokens = 0;     // prefilled again by recomputes
  int64_t recompute_hit_tokens = 0;  // restored from the prefix cache by recomputes instead of prefilled
  double prefill_tokens_per_s = 0;  // the cost model's rates now (measured at start, updated as it runs)
  double compress_tokens_per_s = 0;  // tokens of a sequence compressed per second (planning and compaction)
  double disk_write_bytes_per_s = 0;
  double disk_read_bytes_per_s = 0;
  double restore_bytes_per_s = 0;  // K/V bytes restored per second from the prefix cache (at first: the disk's read)
  int64_t prefix_hits = 0, prefix_hit_tokens = 0;  // first turns started from the prefix cache, and their tokens
};

// A turn: tokens appended to the conversation, then up to max_tokens generated.
struct Turn {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  // Tests and evaluations: when not empty, the turn appends these tokens instead of sampled ones (teacher forcing),
  // max_tokens of them at most, and the logits each was decoded after are still reported.
  std::vector<int32_t> forced;
  // With a prefix cache: lengths of the prompt (0 < p < prompt.size()) where many later requests are likely to share
  // the prompt's start, saved to the cache once the prompt is in, beside its end and its last whole prefill chunk's
  // end (or earlier, so that the same prompt again can use it; infokv serve passes the end of the system turn). Only what was prefilled as a request prefilled from the
  // start would compute it is saved (PrefixCacheOptions::boundary): a length past that is saved shorter.
  std::vector<int64_t> save_points;
};

enum class TurnState : int32_t { queued = 0, running = 1, done = 2, failed = 3 };
// Where a conversation's cache is: nowhere yet, in the pool, in the spill directory, or to be recomputed.
enum class Where : int32_t { none = 0, resident = 1, moved = 2, dropped = 3 };
const char *where_name(Where w);

// What one step produced for one turn.
struct TokenEvent {
  int64_t conversation = 0;
  int32_t token = 0;
  const std::vector<float> *logits = nullptr;  // the logits the token was drawn from; valid until the next step
};

// What the compression policy knows of a sequence dropped for a recompute: each layer's kept positions and slot
// channels, the observation window, the compressor's state of the sequence and its next token's entropy. The recompute puts it back where it holds
// the same positions, so that the conversation compresses later as it would have without the preemption (a moved
// one keeps all of it in its snapshot). Host memory while dropped: 20 bytes per kept token and layer (positions,
// channels) and the window's query rows, taken over from the dropped sequence rather than copied.
struct DroppedEvidence {
  std::vector<std::vector<int32_t>> pos;
  std::vector<std::array<std::vector<float>, kSlotChannels>> channels;
  std::vector<CowRows> window_q;
  std::vector<int32_t> window_pos;
  SeqCompression compression;
  float pending_entropy = 0.0f;  // the entropy its next token is scored with (Session::pending_entropy)
};

class Engine {
 public:
  // Throws like Session's constructor; Error(io) when the spill directory cannot be made.
  Engine(std::shared_ptr<const Model> model, const EngineOptions &opts);
  ~Engine();
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  // A new conversation (no memory until its first turn runs). priority: higher runs first and is preempted last.
  // memory_limit_tokens > 0: compressed to this many tokens (mean over layers) whenever it holds more (needs a
  // compression policy in the session's configuration).
  int64_t open(int32_t priority = 0, int64_t memory_limit_tokens = 0, const SamplerParams &sampling = greedy());
  // Queues a turn; throws bad_state while the conversation's previous turn is queued or running, not_found for an
  // unknown or closed conversation, out_of_range for a token outside the vocabulary (nothing queued).
  void submit(int64_t conversation, Turn turn);
  // Frees the conversation's memory wherever it is (a running turn is cancelled).
  void close(int64_t conversation);

  // One scheduling step: admits queued turns (bringing moved or dropped conversations back), prefills their
  // prompts and decodes one token for every running turn in one batch, making room as the strategy says. Returns
  // the tokens produced. A turn that cannot be given memory by any allowed means fails (state failed, the reason
  // in failure()); the engine goes on with the others.
  std::vector<TokenEvent> step();
  // Whether any turn is queued or running, and how many are.
  bool busy() const { return pending() > 0; }
  int64_t pending() const;
  int64_t conversations() const { return static_cast<int64_t>(convs_.size()); }
  Strategy strategy() const { return opts_.strategy; }

  TurnState state(int64_t conversation) const;
  const std::string &failure(int64_t conversation) const;
  // The conversation's whole token history (prompts and generated tokens).
  const std::vector<int32_t> &tokens(int64_t conversation) const;
  // The tokens generated by its latest turn.
  const std::vector<int32_t> &generated(int64_t conversation) const;
  // Where its cache is now (none: no memory yet); where_name() spells it.
  Where where(int64_t conversation) const;
  // Its session sequence while resident, -1 otherwise.
  int32_t sequence(int64_t conversation) const;

  const std::vector<Decision> &decisions() const { return decisions_; }
  // The prefix cache (null unless EngineOptions::prefix_cache or set_prefix_cache).
  const PrefixCache *prefix_cache() const { return prefix_.get(); }
  // Turns the prefix cache on with these tiers (replacing any before), or off (enabled false). Throws Error(io)
  // when the disk directory cannot be made; nothing changes then.
  void set_prefix_cache(bool enabled, const PrefixCacheOptions &opts);
  const EngineStats &stats() const { return stats_; }
  Session &session() { return *session_; }
  const Session &session() const { return *session_; }

  static SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0;
    return p;
  }

 private:
  struct Conversation {
    int64_t id = 0;
    int32_t priority = 0;
    int64_t memory_limit = 0;
    Sampler sampler;
    std::vector<int32_t> tokens;
    Where where = Where::none;
    int32_t seq = -1;
    std::string spill_path;      // moved
    int64_t spill_bytes = 0;
    int64_t held_blocks = 0;     // moved or dropped: the blocks it held, what bringing it back needs
    std::vector<std::vector<int32_t>> kept;  // dropped after compression: the positions each layer kept
    std::vector<KvDtype> kept_dtype;         // and the dtype each layer held them in (auto's layer precision)
    bool compressed = false;     // its cache was compressed at least once (recompute then restores the kept set)
    // Dropped for a recompute: the policy's evidence as it was, put back by the recompute (DroppedEvidence).
    std::unique_ptr<DroppedEvidence> evidence;
    Turn turn;
    TurnState state = TurnState::done;
    bool prompt_done = false;
    size_t prompt_applied = 0;   // tokens of turn.prompt already in its cache (a prefix cache hit, prefilled parts)
    // A prompt prefilled over several steps (running, prompt_done false): the message is turn.prompt from
    // message_begin (after a prefix cache hit), and the cursor counts its tokens in the cache.
    size_t message_begin = 0;
    Session::PrefillCursor cursor;
    size_t turn_start = 0;       // tokens.size() and the sampler's history when the turn was submitted
    std::deque<int32_t> turn_start_history;
    std::vector<int64_t> save_at;  // lengths of its tokens to go to the prefix cache after this step's decode
    // Its first exact_until tokens' K/V are what a prefill of them from the start computes (a prefix cache hit, then
    // the prompt's chunks; decoded tokens are not): what the prefix cache may take.
    int64_t exact_until = 0;
    std::vector<int32_t> generated;
    std::string failure;
    int64_t arrival = 0;         // order of the current turn's submission
    int64_t last_active = 0;     // step of its latest token (victims: the longest idle first)
    int64_t passed_over = -2;    // the latest step whose prefill went to others while its long prompt waited
    int64_t pending_decision = -1;  // index of the move/recompute decision its return completes
    explicit Conversation(const SamplerParams &p) : sampler(p) {}
  };

  Conversation &conv(int64_t id);
  // Where the tokens of a message prefilled from `start` to `end` stop computing what a prefill of them from the
  // start computes (Session::cut_invariant_from): `end`, or `start` for a message too short; without the promise,
  // the end of its whole chunks.
  int64_t exact_end(int64_t start, int64_t end) const;
  // Saves the conversation's pending prefix-cache lengths (save_at), if it is resident.
  void save_pending(Conversation &c);
  const Conversation &conv(int64_t id) const;
  void measure_rates();
  // Brings `c` into the pool (restores, recomputes or starts it) and prefills its turn's prompt, at most about
  // `allowance` tokens of it now (< 0: all; whole prefill chunks, at least one) and the rest in later steps; false
  // when the pool has no room now even after making room (c stays queued), throws on failure of the turn itself.
  bool admit(Conversation &c, int64_t allowance);
  void bring_back(Conversation &c);
  void recompute(Conversation &c);
  // Frees at least `need` blocks by preempting conversations other than `keep` (and not running ones unless
  // `may_preempt_running`); true when enough were freed.
  bool make_room(int64_t need, const std::vector<int64_t> &keep, bool may_preempt_running, int32_t below_priority);
  // One victim's cheapest action under the strategy, applied; returns blocks freed (0: nothing possible).
  // compress_only: the victim must stay resident (it is the last of the batch), so only compression is tried.
  int64_t preempt(Conversation &v, bool compress_only = false);
  void fail_turn(Conversation &c, const std::string &why);
  void finish_turn(Conversation &c);
  void enforce_limit(Conversation &c);
  // The prompts admitted this step, saved to the prefix cache (once their first token is out).
  void save_prefixes();
  int64_t free_blocks() const { return session_->kv().free_blocks(); }
  int64_t blocks_of(const Conversation &c) const;
  int32_t chunk() const;
  // What is left of its turn's prompt to prefill.
  static int64_t prompt_left(const Conversation &c);

  EngineOptions opts_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<SpillDir> spill_;  // removed last (the destructor removes it explicitly)
  std::string spill_dir_;
  std::map<int64_t, std::unique_ptr<Conversation>> convs_;
  int64_t next_id_ = 1;
  int64_t arrivals_ = 0;
  std::vector<Decision> decisions_;
  EngineStats stats_;
  std::vector<std::vector<float>> event_logits_;
  std::unique_ptr<PrefixCache> prefix_;
};

// Every decision of the engine and its cost model's rates as JSON (the C API's ikv_engine_report_json).
std::string report_json(const Engine &e);

}  // namespace infokv
