// Evidence for a question not yet asked (DESIGN.md §9, "Which question"). Both run tokens through the model after
// the sequence, at the positions after its end, and roll them back, so the sequence is left exactly as it was:
// - the probe: a generic question about the sequence ("which facts, names and numbers does it state?") whose query
//   rows stand in for the unknown question's as the observation window of any window policy and of auto's proxy;
// - context replay (KVzip, arXiv:2505.23416): the model re-reads the sequence after a "repeat the previous context"
//   prompt, and each cached token is scored by the most attention any head of a re-reading query gives it.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>

#include "session/session.hpp"
#include "tokenizer/chat.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

constexpr const char *kReplayInstruction = "Repeat the previous context exactly.";

// A user turn of the model's chat template (a plain-text question for a base model), generation prompt included.
std::vector<int32_t> as_question(const Model &model, const std::string &text) {
  const Tokenizer &tok = model.tokenizer();
  const ChatTemplate t = ChatTemplate::detect(model.chat_template(), tok);
  if (t.format != ChatFormat::none) return t.encode(tok, {{"user", text}}, true, false);
  return tok.encode("\n\nQuestion: " + text + "\nAnswer:", false, false);
}

}  // namespace

std::vector<int32_t> Session::replay_prompt() const { return as_question(*model_, kReplayInstruction); }

std::vector<std::vector<int32_t>> Session::probe_prompts() const {
  std::vector<std::vector<int32_t>> out;
  for (const char *q : kProbeQuestions) out.push_back(as_question(*model_, q));
  return out;
}

void Session::forward_rolled_back(int32_t seq, const std::vector<int32_t> &toks,
                                  const std::function<void(int32_t, const StepObservations &)> &use) {
  const int64_t len0 = kv_->seq(seq).length;
  const auto T = static_cast<int32_t>(toks.size());
  if (T == 0) return;
  if (len0 + T >= (int64_t{1} << 31) - 1) fail(Status::out_of_range, "sequence too long to look ahead of");
  // The tokens go to a temporary fork (sharing every block, copying only the last one it writes to), which is
  // removed afterwards: the sequence's blocks and the pool's count end as they were.
  int32_t tmp = INT32_MAX;
  while (kv_->has(tmp)) --tmp;
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int32_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(len0 + i);
  StepObservations step;
  float pending = state(seq).pending_entropy;
  ForwardChunk c;
  c.tokens = toks.data();
  c.positions = positions.data();
  c.T = T;
  ForwardGroup g;
  g.seq = tmp;
  g.items.resize(static_cast<size_t>(T));
  std::iota(g.items.begin(), g.items.end(), int64_t{0});
  g.pending_entropy = &pending;
  g.step = &step;
  c.groups.push_back(std::move(g));
  c.window_rows = T;  // every row's queries come back in step.window_q
  // Its need: the blocks the tokens take, and a copy of each layer's last block they start inside.
  const int64_t need = kv_->blocks_needed_fork(seq, T);
  if (need > kv_->free_blocks())
    fail(Status::kv_full, "KV cache full: scoring for a later question needs " + std::to_string(need) +
                              " free blocks for " + std::to_string(T) + " tokens; " + std::to_string(kv_->free_blocks()) +
                              " are free");
  kv_->fork(seq, tmp);
  try {
    kv_->append_slots(tmp, positions.data(), T);
    device_->forward_chunk(c, *kv_, nullptr);
    use(tmp, step);
  } catch (...) {
    kv_->remove(tmp);
    throw;
  }
  kv_->remove(tmp);
}

ProbeRows Session::probe_queries(int32_t seq) {
  const auto t0 = std::chrono::steady_clock::now();
  ProbeRows pr;
  for (const std::vector<int32_t> &toks : probe_prompts())
    forward_rolled_back(seq, toks, [&](int32_t, const StepObservations &step) {
      pr.q.resize(step.window_q.size());
      for (size_t l = 0; l < step.window_q.size(); ++l) pr.q[l].insert(pr.q[l].end(), step.window_q[l].begin(), step.window_q[l].end());
      pr.pos.insert(pr.pos.end(), step.window_pos.begin(), step.window_pos.end());
    });
  pr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return pr;
}

ReplayEvidence Session::replay_evidence(int32_t seq) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ctx = state(seq).tokens;
  const std::vector<int32_t> prompt = replay_prompt();
  const HParams &hp = model_->hparams();
  const auto L = static_cast<size_t>(hp.n_layer);
  std::vector<int32_t> n0;
  for (const LayerSlots &Ls : kv_->seq(seq).layers) n0.push_back(Ls.n());
  ReplayEvidence ev;
  ev.score.resize(L);
  for (size_t l = 0; l < L; ++l) ev.score[l].assign(static_cast<size_t>(n0[l]), 0.0f);
  const auto P = static_cast<int32_t>(prompt.size());
  const int32_t qd = hp.n_head * hp.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  // Chunks of the context, each replayed after its own prompt and rolled back (KVzip's chunked scoring): the extra
  // memory is one chunk's, not the context's. The chunk: kReplayChunk, fewer where its query rows (every layer's,
  // until scored) would pass kReplayRowBytes or the pool has no room for it and its prompt (forward_rolled_back's
  // own check).
  const int64_t row_bytes = int64_t{hp.n_layer} * qd * static_cast<int64_t>(sizeof(float));
  int64_t want = std::max<int64_t>(kReplayMinChunk, kReplayRowBytes / std::max<int64_t>(1, row_bytes));
  want = std::min<int64_t>({want, kReplayChunk, std::max<int64_t>(1, static_cast<int64_t>(ctx.size()))});
  const auto fits = [&](int64_t n) {
    return kv_->blocks_needed_fork(seq, static_cast<int32_t>(n) + P) <= kv_->free_blocks();
  };
  while (want > kReplayMinChunk && !fits(want)) want = std::max<int64_t>(kReplayMinChunk, want / 2);
  const auto chunk = static_cast<size_t>(want);
  for (size_t c0 = 0; c0 < ctx.size(); c0 += chunk) {
    const size_t c1 = std::min(ctx.size(), c0 + chunk);
    std::vector<int32_t> toks = prompt;
    toks.insert(toks.end(), ctx.begin() + static_cast<std::ptrdiff_t>(c0), ctx.begin() + static_cast<std::ptrdiff_t>(c1));
    const auto T = static_cast<int32_t>(toks.size());
    forward_rolled_back(seq, toks, [&](int32_t tmp, const StepObservations &step) {
      // The chunk's rows (the prompt's own are left out) over every slot they see; the maximum over the original
      // slots. Layers in parallel; the pool's workers must not throw, so the first error is carried out.
      std::mutex mu;
      std::exception_ptr failed;
      pool_->parallel_for(static_cast<int64_t>(L), 1, [&](int64_t l0, int64_t l1) {
        for (int64_t l = l0; l < l1; ++l) {
          try {
            KvCache::HostLayer host;
            kv_->host_layer(tmp, static_cast<int32_t>(l), host);
            const PagedKv &view = host.view;
            const std::vector<float> &q = step.window_q.at(static_cast<size_t>(l));
            const int32_t nl0 = n0[static_cast<size_t>(l)];
            cpu::attention_probs_max(ev.score[static_cast<size_t>(l)].data(), nl0, q.data() + static_cast<size_t>(P) * qd,
                                     T - P, hp.n_head, view, nl0 + P + 1, scale);
          } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!failed) failed = std::current_exception();
          }
        }
      });
      if (failed) std::rethrow_exception(failed);
    });
    ev.tokens += T;
  }
  ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ev;
}

}  // namespace infokv
