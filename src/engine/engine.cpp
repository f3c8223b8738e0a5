#include "engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/spill_dir.hpp"
#include "snapshot/snapshot.hpp"
#include "util/byte_io.hpp"
#include "util/error.hpp"
#include "util/json_escape.hpp"

namespace infokv {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Moving average of a measured rate: the start-up measurement weighs as much as the latest operation.
void update_rate(double &rate, double bytes_or_tokens, double seconds) {
  if (seconds <= 0 || bytes_or_tokens <= 0) return;
  const double r = bytes_or_tokens / seconds;
  rate = rate > 0 ? 0.5 * rate + 0.5 * r : r;
}

// A sequence's policy evidence, copied before it is dropped for a recompute (Conversation::evidence).
std::unique_ptr<DroppedEvidence> take_evidence(const Session &s, int32_t seq) {
  auto e = std::make_unique<DroppedEvidence>();
  const SeqCache &sc = s.kv().seq(seq);
  for (const LayerSlots &L : sc.layers) {
    e->pos.push_back(L.pos);
    e->channels.push_back(L.channels);
  }
  e->window_q = sc.window_q;  // shared copy-on-write: no rows copied
  e->window_pos = sc.window_pos;
  e->compression = s.compressor().state(seq);
  e->pending_entropy = s.pending_entropy(seq);
  return e;
}

// Puts evidence back on a recomputed sequence, all of it or nothing, where every layer holds the positions it held
// (the recompute restores the kept set): the slot channels, the observation window as it was decoded (a recompute
// runs with the policy off and keeps none), the compressor's state and the next token's entropy.
void restore_evidence(Session &s, int32_t seq, DroppedEvidence &e) {
  SeqCache &sc = s.kv().seq_mut(seq);
  if (e.pos.size() != sc.layers.size() || e.window_q.size() != sc.window_q.size()) return;
  for (size_t l = 0; l < sc.layers.size(); ++l)
    if (sc.layers[l].pos != e.pos[l]) return;
  for (size_t l = 0; l < sc.layers.size(); ++l) sc.layers[l].channels = std::move(e.channels[l]);
  sc.window_q = std::move(e.window_q);
  sc.window_pos = std::move(e.window_pos);
  s.compressor().set_state(seq, std::move(e.compression));
  s.set_pending_entropy(seq, e.pending_entropy);
}

}  // namespace

const char *strategy_name(Strategy s) {
  switch (s) {
    case Strategy::automatic: return "auto";
    case Strategy::fail: return "fail";
    case Strategy::recompute: return "recompute";
    case Strategy::move: return "move";
    case Strategy::compress: return "compress";
  }
  return "?";
}

Strategy parse_strategy(const std::string &name) {
  for (Strategy s : {Strategy::automatic, Strategy::fail, Strategy::recompute, Strategy::move, Strategy::compress})
    if (name == strategy_name(s)) return s;
  fail(Status::invalid_argument, "unknown strategy '" + name + "' (auto, fail, recompute, move, compress)");
}

const char *action_name(Action a) {
  switch (a) {
    case Action::compress: return "compress";
    case Action::move: return "move";
    case Action::recompute: return "recompute";
    case Action::fail: return "fail";
  }
  return "?";
}

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions &opts) : opts_(opts) {
  if (!(opts.min_keep > 0 && opts.min_keep <= 1)) fail(Status::invalid_argument, "min_keep must be in (0, 1]");
  if (!(opts.max_loss >= 0 && opts.max_loss <= 1)) fail(Status::invalid_argument, "max_loss must be in [0, 1]");
  if (opts.max_batch < 0) fail(Status::invalid_argument, "max_batch must not be negative");
  if (opts.max_prefill_tokens < EngineOptions::kPrefillChunkPerStep)
    fail(Status::invalid_argument, "max_prefill_tokens must be a token count, 0 (no limit) or kPrefillChunkPerStep");
  session_ = std::make_unique<Session>(std::move(model), opts.session);
  if (opts_.max_prefill_tokens == EngineOptions::kPrefillChunkPerStep) opts_.max_prefill_tokens = session_->options().ubatch;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (opts.spill_dir.empty()) {
    const fs::path base = fs::temp_directory_path(ec);
    if (ec) fail(Status::io, "no temp directory for the engine's spill files: " + ec.message());
    spill_ = std::make_unique<SpillDir>(base.string(), "infokv-spill-");
  } else {
    // A directory of this engine's own inside the caller's, so that engines sharing one never meet.
    fs::create_directories(opts.spill_dir, ec);
    if (!fs::is_directory(opts.spill_dir, ec)) fail(Status::io, "spill directory '" + opts.spill_dir + "' cannot be made");
    spill_ = std::make_unique<SpillDir>(opts.spill_dir, "engine-");
  }
  spill_dir_ = spill_->path();
  try {
    measure_rates();
    if (opts.prefix_cache) set_prefix_cache(true, opts.prefix);
  } catch (...) {
    spill_.reset();
    throw;
  }
}

void Engine::set_prefix_cache(bool enabled, const PrefixCacheOptions &opts) {
  std::unique_ptr<PrefixCache> p;
  PrefixCacheOptions o = opts;
  o.exact_from = session_->cut_invariant_from();  // where entries may lie (PrefixCacheOptions::boundary)
  o.boundary = chunk();
  if (enabled) p = std::make_unique<PrefixCache>(o, *session_);
  prefix_ = std::move(p);
  opts_.prefix_cache = enabled;
  opts_.prefix = opts;
}

Engine::~Engine() {
  try {
    save_prefixes();
  } catch (...) {  // a destructor reports nothing: the entries are only lost
  }
  prefix_.reset();  // drains the writer before the session goes
  std::error_code ec;
  for (auto &kv : convs_)
    if (!kv.second->spill_path.empty()) std::filesystem::remove(kv.second->spill_path, ec);
  spill_.reset();
}

// The cost model's rates, measured here at start-up: the prefill rate on a scratch sequence of this model and pool,
// and the spill directory's write (as a spill file is written: renamed into place, not synced) and read bandwidth.
void Engine::measure_rates() {
  stats_.prefill_tokens_per_s = opts_.assume_prefill_tokens_per_s;
  stats_.disk_write_bytes_per_s = opts_.assume_disk_bytes_per_s;
  stats_.disk_read_bytes_per_s = opts_.assume_disk_bytes_per_s;
  stats_.compress_tokens_per_s = opts_.assume_compress_tokens_per_s;
  if (stats_.prefill_tokens_per_s <= 0 ||
      (stats_.compress_tokens_per_s <= 0 && session_->compressor().config().enabled())) {
    const int32_t n = std::max<int32_t>(16, std::min<int32_t>(64, chunk()));
    std::vector<BatchToken> batch;
    const int32_t vocab = session_->model().hparams().n_vocab;
    for (int32_t i = 0; i < n; ++i) batch.push_back({0, (i * 7919 + 13) % vocab, false});
    int32_t seq = -1;
    try {
      seq = session_->add_sequence();
      for (BatchToken &b : batch) b.seq = seq;
      session_->decode(batch);  // warm-up: first touch of the weights and pool pages
      session_->truncate(seq, 0);
      const auto t0 = Clock::now();
      session_->decode(batch);
      if (stats_.prefill_tokens_per_s <= 0) stats_.prefill_tokens_per_s = n / std::max(since(t0), 1e-6);
      if (stats_.compress_tokens_per_s <= 0 && session_->compressor().config().enabled()) {
        const auto t1 = Clock::now();
        session_->compressor().compress(seq, n / 2, Question::later, Occasion::automatic);
        stats_.compress_tokens_per_s = n / std::max(since(t1), 1e-6);
      }
    } catch (const Error &) {
      // A pool too small for the scratch sequence: guesses, refined as it runs.
      if (stats_.prefill_tokens_per_s <= 0) stats_.prefill_tokens_per_s = 1000;
      if (stats_.compress_tokens_per_s <= 0) stats_.compress_tokens_per_s = 2000;
    }
    if (seq >= 0 && session_->has_sequence(seq)) session_->remove_sequence(seq);
  }
  if (stats_.disk_write_bytes_per_s <= 0) {
    const std::string path = spill_dir_ + "/rate-probe";
    std::vector<char> buf(size_t{4} << 20);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 131u);
    double w = 0, r = 0;
    try {
      auto t0 = Clock::now();
      {
        FileSink out(path, AtomicFile::Temp::automatic, AtomicFile::Sync::scratch);  // as a spill file is written
        out.write(buf.data(), buf.size());
        out.commit();
      }
      w = buf.size() / std::max(since(t0), 1e-6);
      t0 = Clock::now();
      std::ifstream in(path, std::ios::binary);
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      r = in.gcount() / std::max(since(t0), 1e-6);
    } catch (const Error &) {
    }
    std::error_code ec;
    std::filesystem::remove(path, ec);
    stats_.disk_write_bytes_per_s = w > 0 ? w : 1e8;
    stats_.disk_read_bytes_per_s = r > 0 ? r : 1e8;
  }
  // A first guess: every prefix-cache hit then moves it towards the rate restores reach (update_rate's average).
  stats_.restore_bytes_per_s = stats_.disk_read_bytes_per_s;
}

Engine::Conversation &Engine::conv(int64_t id) {
  auto it = convs_.find(id);
  if (it == convs_.end()) fail(Status::not_found, "no conversation " + std::to_string(id));
  return *it->second;
}

const Engine::Conversation &Engine::conv(int64_t id) const {
  auto it = convs_.find(id);
  if (it == convs_.end()) fail(Status::not_found, "no conversation " + std::to_string(id));
  return *it->second;
}

int64_t Engine::open(int32_t priority, int64_t memory_limit_tokens, const SamplerParams &sampling) {
  if (memory_limit_tokens < 0 || memory_limit_tokens > (int64_t{1} << 28))
    fail(Status::invalid_argument, "memory_limit_tokens must be in [0, 2^28]");
  if (memory_limit_tokens > 0 && !session_->compressor().config().enabled())
    fail(Status::bad_config, "a memory limit needs a compression policy in the session's configuration");
  auto c = std::make_unique<Conversation>(sampling);  // validates the sampling parameters
  c->id = next_id_++;
  c->priority = priority;
  c->memory_limit = memory_limit_tokens;
  const int64_t id = c->id;
  convs_.emplace(id, std::move(c));
  return id;
}

void Engine::submit(int64_t id, Turn turn) {
  Conversation &c = conv(id);
  if (c.state == TurnState::queued || c.state == TurnState::running)
    fail(Status::bad_state, "conversation " + std::to_string(id) + " has a turn in progress");
  if (turn.max_tokens < 0) fail(Status::invalid_argument, "max_tokens must not be negative");
  if (turn.prompt.empty() && c.tokens.empty()) fail(Status::invalid_argument, "a conversation's first turn needs a prompt");
  const int32_t vocab = session_->model().hparams().n_vocab;
  for (const std::vector<int32_t> *v : {&turn.prompt, &turn.forced})
    for (int32_t t : *v)
      if (t < 0 || t >= vocab)
        fail(Status::out_of_range, "token " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  c.turn = std::move(turn);
  c.state = TurnState::queued;
  c.prompt_done = c.turn.prompt.empty() && c.where != Where::none;
  c.prompt_applied = 0;
  c.cursor = Session::PrefillCursor{};
  c.turn_start = c.tokens.size();
  c.turn_start_history = c.sampler.history();
  c.generated.clear();
  c.failure.clear();
  c.arrival = arrivals_++;
}

void Engine::close(int64_t id) {
  Conversation &c = conv(id);
  save_pending(c);
  if (c.where == Where::resident && session_->has_sequence(c.seq)) session_->remove_sequence(c.seq);
  std::error_code ec;
  if (!c.spill_path.empty()) std::filesystem::remove(c.spill_path, ec);
  convs_.erase(id);
}

int64_t Engine::pending() const {
  int64_t n = 0;
  for (const auto &kv : convs_)
    if (kv.second->state == TurnState::queued || kv.second->state == TurnState::running) ++n;
  return n;
}

TurnState Engine::state(int64_t id) const { return conv(id).state; }
const std::string &Engine::failure(int64_t id) const { return conv(id).failure; }
const std::vector<int32_t> &Engine::tokens(int64_t id) const { return conv(id).tokens; }
const std::vector<int32_t> &Engine::generated(int64_t id) const { return conv(id).generated; }
int32_t Engine::sequence(int64_t id) const {
  const Conversation &c = conv(id);
  return c.where == Where::resident ? c.seq : -1;
}
Where Engine::where(int64_t id) const { return conv(id).where; }
const char *where_name(Where w) {
  switch (w) {
    case Where::none: return "none";
    case Where::resident: return "resident";
    case Where::moved: return "moved";
    case Where::dropped: return "dropped";
  }
  return "?";
}

int32_t Engine::chunk() const { return std::max<int32_t>(1, session_->options().ubatch); }

int64_t Engine::exact_end(int64_t start, int64_t end) const {
  const int64_t from = session_->cut_invariant_from();
  if (from <= 0) return start + (end - start) / chunk() * chunk();  // whole chunks only (from an aligned start)
  return end - start >= from ? end : start;                         // a short message is cut as no longer one is
}

void Engine::save_pending(Conversation &c) {
  std::vector<int64_t> lengths;
  lengths.swap(c.save_at);
  if (prefix_ == nullptr || c.where != Where::resident) return;
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  for (int64_t n : lengths)
    if (n > 0) prefix_->save(*session_, c.seq, n);
}

int64_t Engine::prompt_left(const Conversation &c) {
  return c.prompt_done ? 0 : static_cast<int64_t>(c.turn.prompt.size() - c.prompt_applied);
}

int64_t Engine::blocks_of(const Conversation &c) const {
  if (c.where != Where::resident) return 0;
  int64_t n = 0;
  for (const LayerSlots &L : session_->kv().seq(c.seq).layers) n += static_cast<int64_t>(L.blocks.size());
  return n;
}

// Blocks a sequence of `tokens` slots per layer takes, plus one partly filled block per layer.
static int64_t blocks_for(const Session &s, int64_t tokens) {
  const int64_t bs = s.kv().config().block_size;
  return static_cast<int64_t>(s.model().hparams().n_layer) * ((tokens + bs - 1) / bs + 1);
}

void Engine::fail_turn(Conversation &c, const std::string &why) {
  // A turn that fails before its prompt is in (a prefix restored for it included) leaves the conversation's history
  // as it was before the turn; one that fails while generating keeps what it generated (it is in the cache).
  if (!c.prompt_done && c.tokens.size() > c.turn_start) {
    c.tokens.resize(c.turn_start);
    c.exact_until = std::min(c.exact_until, static_cast<int64_t>(c.turn_start));
    c.sampler.set_history(std::vector<int32_t>(c.turn_start_history.begin(), c.turn_start_history.end()));
    c.prompt_applied = 0;
  }
  c.cursor = Session::PrefillCursor{};
  c.state = TurnState::failed;
  c.failure = why;
  ++stats_.failures;
  Decision d;
  d.conversation = c.id;
  d.step = stats_.steps;
  d.action = Action::fail;
  d.why = why;
  d.tokens = static_cast<int64_t>(c.tokens.size());
  // Its memory goes back to the pool; its tokens stay, so that a later turn recomputes them.
  if (c.where == Where::resident) {
    d.blocks = blocks_of(c);
    session_->remove_sequence(c.seq);
    c.seq = -1;
    c.where = c.tokens.empty() ? Where::none : Where::dropped;
    c.compressed = false;
    c.kept.clear();
    c.kept_dtype.clear();
  }
  decisions_.push_back(std::move(d));
}

void Engine::finish_turn(Conversation &c) {
  c.state = TurnState::done;
  c.last_active = stats_.steps;
}

int64_t Engine::preempt(Conversation &v, bool compress_only) {
  if (v.where != Where::resident || opts_.strategy == Strategy::fail) return 0;
  if (compress_only && opts_.strategy != Strategy::compress && opts_.strategy != Strategy::automatic) return 0;
  Session &s = *session_;
  save_pending(v);  // before it leaves the pool
  Compressor &comp = s.compressor();
  const int32_t seq = v.seq;
  const SeqInfo info = s.info(seq);
  const int64_t before = free_blocks();
  const int64_t held = blocks_of(v);
  Decision d;
  d.conversation = v.id;
  d.step = stats_.steps;
  d.tokens = info.length;

  // The two lossless ways out: moving (out and back at the spill directory's measured bandwidth) and recomputing
  // (its tokens at the measured prefill rate); compression costs its planning time and some quality.
  const double move_s = static_cast<double>(info.bytes) / stats_.disk_write_bytes_per_s +
                        static_cast<double>(info.bytes) / stats_.disk_read_bytes_per_s;
  // A recompute restores the longest prefix the cache holds here (at the measured restore rate, its K/V uncompressed)
  // and prefills the rest.
  const int64_t cached = prefix_ != nullptr ? prefix_->longest_local(v.tokens) : 0;
  const double token_bytes =
      info.length > 0 ? static_cast<double>(info.uncompressed_bytes) / static_cast<double>(info.length) : 0.0;
  const double recompute_s = static_cast<double>(info.length - cached) / stats_.prefill_tokens_per_s +
                             static_cast<double>(cached) * token_bytes / stats_.restore_bytes_per_s;
  const double lossless_s = std::min(move_s, recompute_s);
  const Action lossless = move_s <= recompute_s ? Action::move : Action::recompute;
  char why[240];
  std::snprintf(why, sizeof why, "move %.1f ms %s recompute %.1f ms", move_s * 1e3, lossless == Action::move ? "<=" : ">",
                recompute_s * 1e3);
  if (cached > 0)
    std::snprintf(why + std::strlen(why), sizeof why - std::strlen(why), " (%lld of %lld tokens from the prefix cache)",
                  static_cast<long long>(cached), static_cast<long long>(info.length));

  // Compression: toward half of what it keeps, never under min_keep of its length. Planned only where it may be
  // chosen (planning is most of its cost).
  PressureCandidate cand;
  double compress_s = 0, plan_s = 0;
  bool planned = false;
  if (comp.config().enabled() && (opts_.strategy == Strategy::compress || opts_.strategy == Strategy::automatic)) {
    const double kept = comp.mean_kept(seq);
    const int32_t floor_tokens = static_cast<int32_t>(std::ceil(opts_.min_keep * static_cast<double>(info.length)));
    const int32_t target = std::max<int32_t>(floor_tokens, static_cast<int32_t>(kept / 2));
    compress_s = static_cast<double>(info.length) / stats_.compress_tokens_per_s;
    if (target > 0 && target < kept &&
        (opts_.strategy == Strategy::compress || compress_only || compress_s < lossless_s)) {
      // A conversation between turns waits for a question not yet asked; a running one for its next token.
      const Question q = v.state == TurnState::running ? Question::next : Question::later;
      const auto tp = Clock::now();
      try {
        cand = comp.estimate(seq, target, q);
        planned = true;
      } catch (const Error &e) {
        if (e.status() != Status::kv_full) throw;
        cand = PressureCandidate{};
      }
      plan_s = since(tp);
      update_rate(stats_.compress_tokens_per_s, static_cast<double>(info.length), plan_s);
    }
  }

  Action act;
  if (compress_only) {
    if (cand.blocks <= 0) return 0;
    d.why = "the last conversation of the batch: only compression can make room";
  }
  switch (compress_only ? Strategy::compress : opts_.strategy) {
    case Strategy::compress:
      if (compress_only) {
        act = Action::compress;
        break;
      }
      if (cand.blocks <= 0) return 0;
      act = Action::compress;
      d.why = "strategy compress";
      break;
    case Strategy::move: act = Action::move; d.why = std::string("strategy move (") + why + ")"; break;
    case Strategy::recompute: act = Action::recompute; d.why = std::string("strategy recompute (") + why + ")"; break;
    default: {
      const double loss = cand.plan.evicted_share;
      char buf[360];
      if (planned && cand.blocks > 0 && loss <= opts_.max_loss) {
        act = Action::compress;
        std::snprintf(buf, sizeof buf, "compress %.1f ms < lossless (%s), loss %.4f <= %.4f", compress_s * 1e3, why,
                      loss, opts_.max_loss);
      } else {
        act = lossless;
        if (planned)
          std::snprintf(buf, sizeof buf, "%s; compress loss %.4f > %.4f", why, loss, opts_.max_loss);
        else if (comp.config().enabled())
          std::snprintf(buf, sizeof buf, "%s; compress %.1f ms would take longer", why, compress_s * 1e3);
        else
          std::snprintf(buf, sizeof buf, "%s; no compression policy", why);
      }
      d.why = buf;
    }
  }
  d.action = act;
  const auto t0 = Clock::now();
  if (act == Action::compress) {
    try {
      comp.apply_plan(seq, cand.plan);
    } catch (const Error &e) {
      if (e.status() != Status::kv_full) throw;
      return 0;
    }
    v.compressed = true;
    d.est_loss = cand.plan.evicted_share;
    d.est_seconds = compress_s;
    d.measured_seconds = plan_s + since(t0);
    ++stats_.compressions;
  } else if (act == Action::move) {
    const std::string path = spill_dir_ + "/conv-" + std::to_string(v.id) + ".ikvs";
    int64_t bytes = 0;
    try {
      snapshot::SaveOptions so;
      so.window_queries = snapshot::SaveOptions::WindowQueries::always;  // back exactly as it left
      // Scratch: a spill file is useless once its engine is gone (a restarted process removes it), so it is not
      // synced to disk; the page cache is where it is read back from, as a swap would.
      FileSink out(path, AtomicFile::Temp::automatic, AtomicFile::Sync::scratch);
      snapshot::save(s, seq, nullptr, out, so);
      out.commit();
      bytes = static_cast<int64_t>(out.size());
    } catch (const Error &e) {
      // A spill directory that fails (full disk, gone) leaves a recompute, which needs nothing but the tokens;
      // under the move strategy nothing else is allowed, so this victim frees nothing.
      if (opts_.strategy == Strategy::move) return 0;
      act = Action::recompute;
      d.action = act;
      d.why += std::string("; move failed (") + e.what() + "), recompute";
    }
    if (act == Action::move) {
      const double out_s = since(t0);
      update_rate(stats_.disk_write_bytes_per_s, static_cast<double>(bytes), out_s);
      v.spill_path = path;
      v.spill_bytes = bytes;
      stats_.bytes_moved += bytes;
      d.est_seconds = move_s;
      d.measured_seconds = out_s;  // the way back is added when it returns
      ++stats_.moves;
      s.remove_sequence(seq);
      v.where = Where::moved;
    }
  }
  if (act == Action::recompute) {
    v.kept.clear();
    v.kept_dtype.clear();
    bool compressed = false;
    for (const LayerSlots &L : s.kv().seq(seq).layers) {
      v.kept.push_back(L.pos);
      v.kept_dtype.push_back(L.dtype);
      if (L.n() < info.length || L.dtype != s.kv().config().dtype) compressed = true;
    }
    v.compressed = compressed;
    if (!compressed) {
      v.kept.clear();
      v.kept_dtype.clear();
    }
    v.evidence = take_evidence(s, seq);
    d.est_seconds = recompute_s;
    ++stats_.recomputes;
    s.remove_sequence(seq);
    v.where = Where::dropped;
  }
  if (v.where != Where::resident) {
    v.seq = -1;
    v.held_blocks = held;
    v.pending_decision = static_cast<int64_t>(decisions_.size());
  }
  d.blocks = free_blocks() - before;
  decisions_.push_back(std::move(d));
  return free_blocks() - before;
}

bool Engine::make_room(int64_t need, const std::vector<int64_t> &keep, bool may_preempt_running, int32_t priority) {
  if (free_blocks() >= need) return true;
  if (opts_.strategy == Strategy::fail) return false;
  auto kept = [&](int64_t id) { return std::find(keep.begin(), keep.end(), id) != keep.end(); };
  // Victims: conversations between turns, the longest idle first; then queued ones holding memory (lowest
  // priority first); then, when allowed, running turns of lower priority than the one asking (the latest first).
  for (int pass = 0; pass < 4 && free_blocks() < need; ++pass) {
    std::vector<Conversation *> idle, queued, running;
    for (auto &kv : convs_) {
      Conversation &c = *kv.second;
      if (c.where != Where::resident || kept(c.id)) continue;
      if (c.state == TurnState::running) {
        if (may_preempt_running && c.priority < priority) running.push_back(&c);
      } else if (c.state == TurnState::queued) {
        queued.push_back(&c);
      } else {
        idle.push_back(&c);
      }
    }
    std::sort(idle.begin(), idle.end(), [](const Conversation *a, const Conversation *b) {
      if (a->priority != b->priority) return a->priority < b->priority;
      return a->last_active < b->last_active;
    });
    auto low_late = [](const Conversation *a, const Conversation *b) {
      if (a->priority != b->priority) return a->priority < b->priority;
      return a->arrival > b->arrival;
    };
    std::sort(queued.begin(), queued.end(), low_late);
    std::sort(running.begin(), running.end(), low_late);
    bool progress = false;
    for (auto *list : {&idle, &queued, &running})
      for (Conversation *v : *list) {
        if (free_blocks() >= need) return true;
        const bool was_running = v->state == TurnState::running;
        if (preempt(*v) > 0) progress = true;
        if (was_running && v->where != Where::resident) v->state = TurnState::queued;
      }
    if (!progress) break;
  }
  return free_blocks() >= need;
}

// Cuts sequence `seq` back to the positions `kept` lists in each layer (those it holds among them), each layer held
// in its `dtype` (converted once; later chunks are stored in it as they come).
static void cut_to(Session &s, int32_t seq, const std::vector<std::vector<int32_t>> &kept, const std::vector<KvDtype> &dtype) {
  std::vector<std::vector<int32_t>> keep;
  const SeqCache &sc = s.kv().seq(seq);
  bool drops = false;
  for (size_t l = 0; l < sc.layers.size(); ++l) {
    const std::vector<int32_t> &pos = sc.layers[l].pos;
    const std::vector<int32_t> &want = kept[l];
    std::vector<int32_t> k;
    for (int32_t slot = 0; slot < static_cast<int32_t>(pos.size()); ++slot)
      if (std::binary_search(want.begin(), want.end(), pos[static_cast<size_t>(slot)])) k.push_back(slot);
    if (k.size() != pos.size()) drops = true;
    keep.push_back(std::move(k));
  }
  if (drops) s.kv().compact(seq, keep);
  for (size_t l = 0; l < dtype.size() && l < sc.layers.size(); ++l)
    if (sc.layers[l].dtype != dtype[l])
      s.kv().convert_layer(seq, static_cast<int32_t>(l), dtype[l], s.model().layer(static_cast<int32_t>(l)).bk);
}

void Engine::recompute(Conversation &c) {
  Session &s = *session_;
  Compressor &comp = s.compressor();
  const CompressionConfig saved = comp.config();
  const auto t0 = Clock::now();
  const size_t n = c.tokens.size();
  // The front from the prefix cache when it holds one (what a prefill from the start computes, restored instead of
  // prefilled; Decision::why estimated it), the rest prefilled as one message from there.
  int32_t seq = -1;
  int64_t hit = 0;
  if (prefix_ != nullptr) {
    std::string tier;
    try {
      seq = prefix_->restore_longest(s, c.tokens, &hit, &tier);
    } catch (const Error &e) {
      if (e.status() != Status::kv_full) throw;
      seq = -1;  // no room for the whole front now: prefilled, in no more than the kept set and a chunk
    }
    if (seq < 0) {
      hit = 0;
    } else {
      update_rate(stats_.restore_bytes_per_s, static_cast<double>(s.info(seq).bytes), since(t0));
      // The policy's per-token evidence (slot channels) as a recompute without the cache leaves it (the rest is
      // prefilled with the policy off): the same state either way, not a front with evidence beside a back without.
      for (LayerSlots &L : s.kv().seq_mut(seq).layers)
        for (std::vector<float> &ch : L.channels) std::fill(ch.begin(), ch.end(), 0.0f);
    }
  }
  // The tokens are prefilled with compression off and the sequence cut back to the kept set after each chunk: the
  // same positions as before in every layer, in no more memory than the kept set and one chunk.
  const CompressionConfig off;  // policy none (a quality target or budget without a policy would be invalid)
  Clock::time_point t_prefill;
  try {
    if (seq < 0) seq = s.add_sequence();
    if (c.compressed && hit > 0) cut_to(s, seq, c.kept, c.kept_dtype);
    comp.set_config(off);
    t_prefill = Clock::now();
    const size_t from = static_cast<size_t>(hit);
    for (size_t b = from, e = from; b < n; b = e) {
      e = from + s.next_cut(n - from, b - from, static_cast<size_t>(chunk()));
      std::vector<BatchToken> batch;
      for (size_t i = b; i < e; ++i) batch.push_back({seq, c.tokens[i], false});
      s.decode(batch);
      if (c.compressed) cut_to(s, seq, c.kept, c.kept_dtype);
    }
    comp.set_config(saved);
  } catch (...) {
    comp.set_config(saved);
    if (seq >= 0 && s.has_sequence(seq)) s.remove_sequence(seq);
    throw;
  }
  const double secs = since(t0);
  update_rate(stats_.prefill_tokens_per_s, static_cast<double>(n) - static_cast<double>(hit), since(t_prefill));
  stats_.recomputed_tokens += static_cast<int64_t>(n) - hit;
  stats_.recompute_hit_tokens += hit;
  // Recomputed without the policy: a policy that sums attention runs every query in one pass, and without it long
  // contexts take the chunked path (other bits), so then nothing recomputed is what a prefill under it computes.
  // A front from the cache is what a prefill from the start computes, and the rest (at least cut_invariant_from
  // tokens: PrefixCache::resumable) what it computes after it.
  c.exact_until = saved.needs_accumulated_attention()
                      ? 0
                      : std::min(c.exact_until, exact_end(hit, static_cast<int64_t>(n)));
  if (c.pending_decision >= 0 && c.pending_decision < static_cast<int64_t>(decisions_.size())) {
    Decision &d = decisions_[static_cast<size_t>(c.pending_decision)];
    d.measured_seconds = secs;
    if (hit > 0) d.why += "; " + std::to_string(hit) + " tokens came back from the prefix cache";
  }
  c.pending_decision = -1;
  c.seq = seq;
  c.where = Where::resident;
  c.kept.clear();
  c.kept_dtype.clear();
  if (c.evidence != nullptr) restore_evidence(s, seq, *c.evidence);
  c.evidence.reset();
}

void Engine::bring_back(Conversation &c) {
  if (c.where == Where::dropped) {
    recompute(c);
    return;
  }
  const auto t0 = Clock::now();
  std::vector<int32_t> ids;
  {
    FileSource in(c.spill_path);
    ids = snapshot::restore(*session_, nullptr, in, 1);
  }
  if (ids.size() != 1 || session_->tokens(ids[0]) != c.tokens) {
    for (int32_t id : ids) session_->remove_sequence(id);
    fail(Status::bad_snapshot, "the spill file " + c.spill_path + " is not this conversation's");
  }
  const double secs = since(t0);
  update_rate(stats_.disk_read_bytes_per_s, static_cast<double>(c.spill_bytes), secs);
  stats_.bytes_moved += c.spill_bytes;
  if (c.pending_decision >= 0 && c.pending_decision < static_cast<int64_t>(decisions_.size()))
    decisions_[static_cast<size_t>(c.pending_decision)].measured_seconds += secs;
  c.pending_decision = -1;
  std::error_code ec;
  std::filesystem::remove(c.spill_path, ec);
  c.spill_path.clear();
  c.spill_bytes = 0;
  c.seq = ids.at(0);
  c.where = Where::resident;
}

bool Engine::admit(Conversation &c, int64_t allowance) {
  Session &s = *session_;
  bool others_running = false;
  for (auto &kv : convs_)
    if (kv.second.get() != &c && kv.second->state == TurnState::running) others_running = true;
  // A turn that could not fit even in an empty pool (nothing compresses it while it is prefilled: no policy, or a
  // budget of its whole length) fails now instead of holding up the queue behind it until the pool drains.
  {
    const CompressionConfig &cc = s.compressor().config();
    const bool shrinks = cc.enabled() && (cc.budget_tokens > 0 || (cc.budget_fraction > 0 && cc.budget_fraction < 1) ||
                                          cc.max_loss > 0);
    const int64_t total = s.kv().stats().blocks_total;
    const int64_t tokens = static_cast<int64_t>(c.tokens.size() + (c.prompt_done ? 0 : c.turn.prompt.size() - c.prompt_applied));
    if (!shrinks && blocks_for(s, tokens) - s.model().hparams().n_layer > total)
      fail(Status::kv_full, "this conversation (" + std::to_string(tokens) + " tokens) does not fit the KV pool (" +
                                std::to_string(total) + " blocks) even alone");
  }
  if (c.where == Where::moved || c.where == Where::dropped) {
    const int64_t need = c.held_blocks + (c.where == Where::dropped ? blocks_for(s, chunk()) : 0);
    if (!make_room(need, {c.id}, true, c.priority)) {
      if (others_running) return false;  // they will finish and become victims
    }
    try {
      bring_back(c);
    } catch (const Error &e) {
      const bool damaged = e.status() == Status::bad_snapshot || e.status() == Status::wrong_model ||
                           e.status() == Status::version || e.status() == Status::io;
      if (e.status() != Status::kv_full) {
        // A moved conversation whose snapshot cannot be read back is recomputed from its tokens.
        if (c.where == Where::moved && damaged) {
          std::error_code ec;
          std::filesystem::remove(c.spill_path, ec);
          c.spill_path.clear();
          c.where = Where::dropped;
          c.compressed = false;
          c.held_blocks = blocks_for(s, static_cast<int64_t>(c.tokens.size()));
          Decision d;
          d.conversation = c.id;
          d.step = stats_.steps;
          d.action = Action::recompute;
          d.why = std::string("snapshot could not be read back (") + e.what() + "): recomputed";
          d.tokens = static_cast<int64_t>(c.tokens.size());
          decisions_.push_back(std::move(d));
          ++stats_.recomputes;
          return admit(c, allowance);
        }
        throw;
      }
      if (others_running) return false;
      throw;
    }
  }
  std::vector<int32_t> rest;  // what the turn's prompt still needs prefilled
  if (!c.prompt_done) rest.assign(c.turn.prompt.begin() + static_cast<std::ptrdiff_t>(c.prompt_applied), c.turn.prompt.end());
  bool room_made = false;
  if (c.where == Where::none && prefix_ != nullptr) {
    // A new conversation: start from the longest cached prefix of its prompt when there is one that fits.
    int64_t L = 0;
    std::string tier;
    int32_t seq = -1;
    try {
      // Room for the whole prompt, so that the hit and the rest's prefill both fit (one make_room for the two).
      if (!make_room(blocks_for(s, static_cast<int64_t>(rest.size())), {c.id}, true, c.priority) && others_running) {
        c.state = TurnState::queued;
        return false;
      }
      room_made = true;
      const auto t0 = Clock::now();
      seq = prefix_->restore_longest(s, rest, &L, &tier);
      if (seq >= 0) update_rate(stats_.restore_bytes_per_s, static_cast<double>(s.info(seq).bytes), since(t0));
    } catch (const Error &e) {
      if (e.status() != Status::kv_full) throw;
      seq = -1;  // no room for the hit now: prefilled as usual
    }
    if (seq >= 0) {
      c.seq = seq;
      c.where = Where::resident;
      rest.erase(rest.begin(), rest.begin() + L);
      c.prompt_applied = c.turn.prompt.size() - rest.size();
      ++stats_.prefix_hits;
      stats_.prefix_hit_tokens += static_cast<int64_t>(c.prompt_applied);
      for (size_t i = 0; i < c.prompt_applied; ++i) c.sampler.accept(c.turn.prompt[i]);
      c.tokens.insert(c.tokens.end(), c.turn.prompt.begin(), c.turn.prompt.begin() + static_cast<std::ptrdiff_t>(c.prompt_applied));
      c.exact_until = L;  // an entry holds what a prefill from the start computes (PrefixCache::save)
    }
  }
  if (c.where == Where::none) {
    c.seq = s.add_sequence();
    c.where = Where::resident;
  }
  if (!c.prompt_done) {
    // The prompt (what the prefix cache left of it) is one message to the session, prefilled by whole chunks over
    // as many steps as the allowance asks: exactly what one prefill of it computes.
    if (!c.cursor.started) c.message_begin = c.prompt_applied;
    const std::vector<int32_t> message(c.turn.prompt.begin() + static_cast<std::ptrdiff_t>(c.message_begin),
                                       c.turn.prompt.end());
    const size_t ub = static_cast<size_t>(chunk());
    const size_t left = message.size() - c.cursor.done;
    size_t part = left;
    if (allowance >= 0 && static_cast<size_t>(allowance) < left)
      part = std::min(left, std::max(ub, static_cast<size_t>(allowance) / ub * ub));
    const int64_t need = s.kv().blocks_needed({c.seq}, {static_cast<int32_t>(part)});
    if (!room_made && !make_room(need, {c.id}, true, c.priority) && others_running) {
      c.state = TurnState::queued;
      return false;
    }
    const auto t0 = Clock::now();
    const size_t from = c.cursor.done;
    // kv_full here: not even this one conversation fits (fail_turn rolls the turn back)
    const size_t n = message.empty() ? 0 : s.prefill_part(c.seq, message, &c.cursor, part);
    const double secs = since(t0);
    update_rate(stats_.prefill_tokens_per_s, static_cast<double>(n), secs);
    const auto b = message.begin() + static_cast<std::ptrdiff_t>(from), e = b + static_cast<std::ptrdiff_t>(n);
    for (auto it = b; it != e; ++it) c.sampler.accept(*it);
    c.tokens.insert(c.tokens.end(), b, e);
    c.prompt_applied += n;
    stats_.prefilled_tokens += static_cast<int64_t>(n);
    if (c.prompt_applied == c.turn.prompt.size()) {
      c.prompt_done = true;
      // The message ran in chunks of whole pieces from its start (unless the pool cut one short): its tokens extend the
      // exact prefix when they follow it.
      const int64_t start = static_cast<int64_t>(c.turn_start + c.message_begin), end = static_cast<int64_t>(c.tokens.size());
      if (start == c.exact_until && !c.cursor.cut_short) c.exact_until = exact_end(start, end);
      c.cursor = Session::PrefillCursor{};
      if (prefix_ != nullptr) {  // saved after the step: off the TTFT path
        c.save_at.clear();
        for (int64_t p : c.turn.save_points)
          if (p > 0 && p < static_cast<int64_t>(c.turn.prompt.size()))
            c.save_at.push_back(std::min(static_cast<int64_t>(c.turn_start) + p, c.exact_until));
        c.save_at.push_back(std::min(end, c.exact_until));
        // And the last whole chunk's end, or earlier so that the same prompt again can resume from it (a resumed
        // rest is at least cut_invariant_from tokens): a later prompt sharing a long start but not this one's end (a
        // document asked about in other words, a retry) finds it there.
        const int64_t from = s.cut_invariant_from();
        const int64_t whole = from > 0 ? std::min(end / chunk() * chunk(), end - from) : end / chunk() * chunk();
        c.save_at.push_back(std::min(whole, c.exact_until));
      }
    }
  }
  c.state = TurnState::running;
  return true;
}

void Engine::enforce_limit(Conversation &c) {
  if (c.memory_limit <= 0 || c.where != Where::resident) return;
  Compressor &comp = session_->compressor();
  const int32_t limit = static_cast<int32_t>(c.memory_limit);  // at most 2^28 (open)
  if (comp.mean_kept(c.seq) <= static_cast<double>(limit) + static_cast<double>(comp.slack_for(limit))) return;
  const auto t0 = Clock::now();
  if (comp.try_compress(c.seq, limit)) {
    Decision d;
    d.conversation = c.id;
    d.step = stats_.steps;
    d.action = Action::compress;
    d.why = "over its memory limit of " + std::to_string(c.memory_limit) + " tokens";
    d.tokens = static_cast<int64_t>(c.tokens.size());
    d.measured_seconds = since(t0);
    decisions_.push_back(std::move(d));
    c.compressed = true;
    ++stats_.compressions;
  }
}

std::vector<TokenEvent> Engine::step() {
  save_prefixes();  // the prompts admitted last step, now that their first tokens are out
  ++stats_.steps;
  event_logits_.clear();
  Session &s = *session_;
  const Tokenizer &tok = s.model().tokenizer();

  // 1. Admission: prompts begun in earlier steps go on, and queued turns are admitted, by priority, then (when a
  //    step's prefill is limited) short prompts before long ones, then in order of arrival; one that does not fit
  //    waits, and so do the ones behind it.
  std::vector<Conversation *> queued;
  int64_t running = 0;
  for (auto &kv : convs_) {
    Conversation &c = *kv.second;
    if (c.state == TurnState::queued || (c.state == TurnState::running && !c.prompt_done)) queued.push_back(&c);
    if (c.state == TurnState::running) ++running;
  }
  const int64_t per_step = opts_.max_prefill_tokens;  // 0: no limit (the default was resolved to ubatch at start)
  // Within a priority, turns whose prompt (what is left of it) fits in one step's prefill go ahead of longer ones,
  // and a longer one passed over in the last step goes first in this one: short turns are not held behind a long
  // prompt for all of its chunks, and a long prompt still gets every other step's prefill at least.
  const int64_t now = stats_.steps;
  auto order = [&](const Conversation *c) {
    if (per_step <= 0) return 0;
    if (c->passed_over == now - 1) return 0;
    return prompt_left(*c) <= per_step ? 1 : 2;
  };
  std::sort(queued.begin(), queued.end(), [&](const Conversation *a, const Conversation *b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (order(a) != order(b)) return order(a) < order(b);
    return a->arrival < b->arrival;
  });
  const int64_t prefilled_before = stats_.prefilled_tokens + stats_.recomputed_tokens;
  for (Conversation *c : queued) {
    const bool begun = c->state == TurnState::running;  // its prompt is part-way in
    if (!begun && opts_.max_batch > 0 && running >= opts_.max_batch) continue;
    const int64_t used = stats_.prefilled_tokens + stats_.recomputed_tokens - prefilled_before;
    if (per_step > 0 && used >= per_step) {  // the rest wait for the next step, in order
      for (auto it = std::find(queued.begin(), queued.end(), c); it != queued.end(); ++it)
        if (prompt_left(**it) > per_step) (*it)->passed_over = now;
      break;
    }
    try {
      if (!admit(*c, per_step > 0 ? per_step - used : -1)) break;
      if (!begun) ++running;
    } catch (const Error &e) {
      fail_turn(*c, std::string("no memory for this turn: ") + e.what());
      if (begun) --running;
    }
  }

  // 2. One token for every running turn, in one batch.
  std::vector<Conversation *> batch;
  for (auto &kv : convs_)
    if (kv.second->state == TurnState::running && kv.second->prompt_done) batch.push_back(kv.second.get());
  std::sort(batch.begin(), batch.end(), [](const Conversation *a, const Conversation *b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->arrival < b->arrival;
  });
  std::vector<int32_t> next;
  std::vector<Rng> drawn_from;  // each sampler's state before its draw: a turn preempted now draws again later
  std::vector<Conversation *> go;
  for (Conversation *c : batch) {
    const size_t i = c->generated.size();
    const bool forced = !c->turn.forced.empty();
    const int32_t limit = forced ? std::min<int32_t>(c->turn.max_tokens, static_cast<int32_t>(c->turn.forced.size()))
                                 : c->turn.max_tokens;
    if (static_cast<int32_t>(i) >= limit) {
      finish_turn(*c);
      continue;
    }
    const std::vector<float> &lg = s.logits(c->seq);
    const Rng before = c->sampler.rng();
    const int32_t t = forced ? c->turn.forced[i] : c->sampler.sample(lg.data(), static_cast<int32_t>(lg.size()));
    if (!forced && tok.is_eog(t)) {
      finish_turn(*c);
      continue;
    }
    go.push_back(c);
    next.push_back(t);
    drawn_from.push_back(before);
  }
  // Room for the batch: idle and queued conversations give way first, then the batch's own tail. Whatever throws
  // from here on leaves every turn able to draw its token again.
  auto undraw = [&] {
    for (size_t i = 0; i < go.size(); ++i) go[i]->sampler.rng() = drawn_from[i];
  };
  try {
  while (!go.empty()) {
    std::vector<int32_t> ids, ones;
    std::vector<int64_t> keep;
    for (Conversation *c : go) {
      ids.push_back(c->seq);
      ones.push_back(1);
      keep.push_back(c->id);
    }
    const int64_t need = s.kv().blocks_needed(ids, ones);
    if (make_room(need, keep, false, INT32_MIN)) break;
    Conversation *v = go.back();
    // The last of the batch cannot make room by leaving (it would come back to the same full pool): only
    // compressing it can; otherwise its turn fails.
    const int64_t freed = preempt(*v, go.size() == 1);
    if (freed > 0 && v->where == Where::resident) continue;  // compressed: it stays in the batch
    v->sampler.rng() = drawn_from.back();
    go.pop_back();
    next.pop_back();
    drawn_from.pop_back();
    if (freed > 0) {
      v->state = TurnState::queued;  // moved or dropped mid-turn: resumes when it is admitted again
    } else {
      fail_turn(*v, opts_.strategy == Strategy::fail ? "KV pool full" : "KV pool full and nothing left to free");
    }
  }
  } catch (...) {
    undraw();
    throw;
  }
  std::vector<TokenEvent> events;
  if (go.empty()) return events;
  event_logits_.reserve(go.size());
  std::vector<BatchToken> items;
  for (size_t i = 0; i < go.size(); ++i) {
    event_logits_.push_back(s.logits(go[i]->seq));
    items.push_back({go[i]->seq, next[i], false});
  }
  try {
    s.decode(items);  // room was made above: a failure here is a bug (or host memory), reported as it is
  } catch (...) {
    undraw();
    throw;
  }
  stats_.decoded_tokens += static_cast<int64_t>(go.size());
  for (size_t i = 0; i < go.size(); ++i) {
    Conversation &c = *go[i];
    c.sampler.accept(next[i]);
    c.tokens.push_back(next[i]);
    c.generated.push_back(next[i]);
    c.last_active = stats_.steps;
    events.push_back({c.id, next[i], &event_logits_[i]});
    enforce_limit(c);
  }
  return events;
}

void Engine::save_prefixes() {
  if (prefix_ == nullptr) return;
  for (auto &kv : convs_) {
    Conversation &c = *kv.second;
    save_pending(c);
  }
}

std::string report_json(const Engine &e) {
  auto num = [](double v) {
    if (!std::isfinite(v)) return std::string("null");
    char b[40];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  const EngineStats &s = e.stats();
  std::string j = "{\"strategy\":\"" + std::string(strategy_name(e.strategy())) + "\",\"rates\":{";
  j += "\"prefill_tokens_per_s\":" + num(s.prefill_tokens_per_s) + ",\"disk_write_bytes_per_s\":" +
       num(s.disk_write_bytes_per_s) + ",\"disk_read_bytes_per_s\":" + num(s.disk_read_bytes_per_s) +
       ",\"restore_bytes_per_s\":" + num(s.restore_bytes_per_s) + ",\"compress_tokens_per_s\":" +
       num(s.compress_tokens_per_s) + "},\"decisions\":[";
  bool first = true;
  for (const Decision &d : e.decisions()) {
    j += first ? "" : ",";
    first = false;
    j += "{\"conversation\":" + std::to_string(d.conversation) + ",\"step\":" + std::to_string(d.step) +
         ",\"action\":\"" + action_name(d.action) + "\",\"why\":\"" + json_escape(d.why) + "\"" +
         ",\"blocks\":" + std::to_string(d.blocks) + ",\"tokens\":" + std::to_string(d.tokens) +
         ",\"est_seconds\":" + num(d.est_seconds) + ",\"est_loss\":" + num(d.est_loss) +
         ",\"measured_seconds\":" + num(d.measured_seconds) + "}";
  }
  return j + "]}";
}

}  // namespace infokv
