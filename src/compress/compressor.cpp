// The compressor: scores every cached token of every layer under the configured policy and keeps the best within
// the budget (DESIGN.md §4), compacts the cache so the memory returns to the pool, and decides when (§9).
#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <cmath>
#include <limits>
#include <cstdio>

#include "compress/auto_policy.hpp"
#include "compress/policy_table.hpp"
#include "compress/scores.hpp"
#include "compress/compressor.hpp"
#include "util/error.hpp"

namespace infokv {

Compressor::Compressor(const Model &model, KvCache &kv, ThreadPool &pool, EvidenceSource &evidence,
                       WindowProbsFn window_probs, const CompressionConfig &config)
    : model_(model), kv_(kv), pool_(pool), evidence_(evidence), window_probs_(std::move(window_probs)), config_(config) {
  config_.validate();
}

void Compressor::set_config(const CompressionConfig &c) {
  c.validate();
  config_ = c;
}

SeqCompression &Compressor::state_mut(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail(Status::not_found, "no sequence " + std::to_string(seq));
  return it->second;
}

const SeqCompression &Compressor::state(int32_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail(Status::not_found, "no sequence " + std::to_string(seq));
  return it->second;
}

void Compressor::set_state(int32_t seq, SeqCompression st) { seqs_[seq] = std::move(st); }

int64_t Compressor::host_bytes(int32_t seq) const {
  // A std::map node (the pair and about four pointers of tree links) and the spans' buffer.
  return static_cast<int64_t>(sizeof(std::pair<const int32_t, SeqCompression>) + 4 * sizeof(void *) +
                              state(seq).spans.capacity() * sizeof(ProtectedSpan));
}

void Compressor::protect(int32_t seq, const ProtectedSpan &span) { add_span(state_mut(seq).spans, span); }

void Compressor::set_spans(int32_t seq, std::vector<ProtectedSpan> spans) {
  if (spans.size() > static_cast<size_t>(kMaxProtectedSpans))
    fail(Status::out_of_range, "more than " + std::to_string(kMaxProtectedSpans) + " protected spans");
  state_mut(seq).spans = std::move(spans);
}

LayerScoreInput Compressor::layer_input(int32_t seq, int32_t l, const std::vector<ProtectedSpan> &spans,
                                        const EvidenceRows &rows) const {
  const SeqCache &sc = kv_.seq(seq);
  const HParams &hp = model_.hparams();
  LayerScoreInput in;
  in.kv = kv_.view(seq, l);
  in.slots = &sc.layers[static_cast<size_t>(l)];
  in.window_q = rows.own ? &rows.q[static_cast<size_t>(l)] : &sc.window_q[static_cast<size_t>(l)].get();
  in.window_pos = rows.own ? &rows.pos : &sc.window_pos;
  in.probe_rows = rows.own ? rows.probe : 0;
  in.n_heads = hp.n_head;
  in.head_dim = hp.head_dim;
  in.prefill = state(seq).n_compressions == 0;
  in.spans = &spans;
  return in;
}

int32_t Compressor::budget_at(int64_t length) const {
  const CompressionConfig &c = config_;
  if (c.budget_tokens > 0) return c.budget_tokens;
  // A quality target alone has no budget: any sequence longer than the window is a candidate, and auto decides how
  // far.
  if (!c.has_budget()) return window_capacity();
  const double b = std::llround(c.budget_fraction * static_cast<double>(length));
  return static_cast<int32_t>(std::min<double>(INT32_MAX, std::max(1.0, b)));
}

std::vector<ProtectedSpan> Compressor::spans_for_compression(int32_t seq, int32_t budget, int64_t *released) const {
  const CompressionConfig &c = config_;
  const std::vector<ProtectedSpan> &spans = state(seq).spans;
  *released = 0;
  if (spans.empty() || !c.has_budget()) return spans;
  const int32_t w = kept_window(c, budget);
  const SeqCache &sc = kv_.seq(seq);
  // The observation window's first position: the window is the last w slots (none for a budget under 4), and the
  // latest positions are kept in every layer.
  int64_t cand_end = sc.length;
  if (!sc.layers.empty() && w > 0) {
    const LayerSlots &L = sc.layers[0];
    cand_end = L.n() > w ? L.pos[static_cast<size_t>(L.n() - w)] : 0;
  }
  // In all, never-evicted tokens may fill what the slack leaves above the budget (the layer then holds budget + slack,
  // the trigger's bound); the spans after the first, a share of the budget.
  const int64_t all = std::max<int64_t>(0, int64_t{budget} + slack_for(budget) - w);
  const auto rest = static_cast<int64_t>(kProtectedShare * static_cast<double>(std::max(0, budget - w)));
  return protection_within(spans, cand_end, all, rest, released);
}

Compressor::EvidenceRows Compressor::evidence_rows(int32_t seq, Question q, Question *served, double *seconds) {
  EvidenceRows rows;
  *served = Question::next;
  *seconds = 0;
  if (q == Question::next || !config_.needs_window_queries()) return rows;
  ProbeRows pr;
  try {
    pr = evidence_.probe_queries(seq);
  } catch (const Error &e) {
    if (e.status() != Status::kv_full) throw;
    return rows;  // no room for the probe (a full pool is being relieved): the window alone
  }
  const SeqCache &sc = kv_.seq(seq);
  rows.own = true;
  rows.probe = static_cast<int32_t>(pr.pos.size());
  if (q == Question::both) rows.pos = sc.window_pos;
  rows.pos.insert(rows.pos.end(), pr.pos.begin(), pr.pos.end());
  rows.q.resize(sc.layers.size());
  for (size_t l = 0; l < sc.layers.size(); ++l) {
    if (q == Question::both) rows.q[l] = sc.window_q[l].get();
    rows.q[l].insert(rows.q[l].end(), pr.q[l].begin(), pr.q[l].end());
  }
  *served = q;
  *seconds = pr.seconds;
  return rows;
}

CompressionPlan Compressor::plan(int32_t seq, int32_t budget_tokens, Question q, Occasion occasion) {
  const CompressionConfig &c = config_;
  if (!c.enabled()) fail(Status::bad_state, "compression policy is 'none'");
  kv_.seq(seq);  // not_found for an unknown sequence
  const int32_t B = budget_tokens > 0 ? budget_tokens : budget_for(seq);
  // An explicit budget is a byte budget; otherwise the configured budget and quality target, either or both.
  const int32_t auto_B = budget_tokens > 0 || c.has_budget() ? B : 0;
  const double auto_max_loss = budget_tokens > 0 ? 0.0 : c.max_loss;
  // The replay is a pass over the whole sequence: not spent where no layer holds more than its budget (the
  // configured shape's; a pyramid gives some layers less than B).
  bool over = false;
  {
    std::vector<int32_t> counts;
    for (const LayerSlots &L : kv_.seq(seq).layers) counts.push_back(L.n());
    const std::vector<int32_t> budgets = layer_budgets(c, counts, B);
    for (size_t l = 0; l < counts.size(); ++l)
      over = over || counts[l] > whole_block_budget(budgets[l], kv_.config().block_size);
  }
  // auto, asked now for a question not yet asked, under a byte budget: the context replay, where the pool has room.
  if (c.is_auto() && occasion == Occasion::request && q == Question::later && auto_B > 0 && auto_max_loss <= 0 && over) {
    CompressionPlan plan;
    if (plan_auto_replay(seq, auto_B, &plan)) return plan;
  }
  Question served = Question::next;
  double probe_seconds = 0;
  const EvidenceRows rows = evidence_rows(seq, q, &served, &probe_seconds);
  CompressionPlan plan;
  if (c.is_auto()) {
    plan = plan_auto(seq, auto_B, auto_max_loss, rows);
  } else {
    ReplayEvidence replay;
    if (c.needs_replay() && over) {
      replay = evidence_.replay_evidence(seq);
    } else if (c.needs_replay()) {  // every layer keeps all it holds: any scores will do
      for (const LayerSlots &L : kv_.seq(seq).layers) replay.score.emplace_back(static_cast<size_t>(L.n()), 0.0f);
    }
    plan = plan_fixed(c, seq, B, rows, c.needs_replay() ? &replay : nullptr, nullptr);
  }
  plan.question = served;
  plan.probe_seconds = probe_seconds;
  return plan;
}

bool Compressor::plan_auto_replay(int32_t seq, int32_t B, CompressionPlan *out) {
  ReplayEvidence replay;
  try {
    replay = evidence_.replay_evidence(seq);
  } catch (const Error &e) {
    if (e.status() != Status::kv_full) throw;
    return false;  // no room for a replayed chunk: the probe, as an automatic compression
  }
  // The probe too (its room is checked on its own): each layer keeps what either ranks high.
  Question served = Question::next;
  double probe_seconds = 0;
  const EvidenceRows rows = evidence_rows(seq, Question::later, &served, &probe_seconds);
  CompressionConfig kz = config_;
  kz.policy = PolicyKind::kvzip;
  std::vector<double> share;
  CompressionPlan plan = plan_fixed(kz, seq, B, rows, &replay, &share, rows.own);
  plan.question = Question::later;
  plan.probe_seconds = replay.seconds + probe_seconds;
  const int32_t b = whole_block_budget(B, kv_.config().block_size);
  AutoReport &r = plan.report;
  for (size_t l = 0; l < plan.keep.size(); ++l) {
    AutoLayerChoice ch;
    ch.evidence = Evidence::replay;
    ch.alpha = 1.0f;
    ch.budget = static_cast<int32_t>(plan.keep[l].size());
    ch.loss = static_cast<float>(share[l]);
    r.layers.push_back(ch);
    r.tokens += ch.budget;
    r.uniform_tokens += std::min(b, kv_.seq(seq).layers[l].n());
    r.loss += share[l] / static_cast<double>(plan.keep.size());
  }
  *out = std::move(plan);
  return true;
}

CompressionPlan Compressor::plan_fixed(const CompressionConfig &c, int32_t seq, int32_t B, const EvidenceRows &rows,
                                       const ReplayEvidence *replay, std::vector<double> *layer_share,
                                       bool with_probe) {
  const SeqCache &sc = kv_.seq(seq);
  const HParams &hp = model_.hparams();
  CompressionPlan plan;
  plan.spans = spans_for_compression(seq, B, &plan.released_tokens);
  std::vector<int32_t> counts;
  for (const LayerSlots &L : sc.layers) counts.push_back(L.n());
  std::vector<int32_t> budgets = layer_budgets(c, counts, B);
  const int32_t bs = kv_.config().block_size;
  for (int32_t &b : budgets) b = whole_block_budget(b, bs);
  plan.keep.resize(sc.layers.size());
  if (c.needs_replay() && replay == nullptr) fail(Status::internal, std::string(policy_name(c.policy)) + " needs the context replay");
  if (policy_info(c.policy).global_spread && c.needs_replay()) {
    // The uniform budgets' blocks go to the layers whose tokens the replay ranks highest anywhere: what each layer
    // always keeps (its window, the protected spans) ranks first.
    std::vector<std::vector<float>> ranked(sc.layers.size());
    for (int32_t l = 0; l < hp.n_layer; ++l) {
      const auto li = static_cast<size_t>(l);
      const LayerSlots &L = sc.layers[li];
      std::vector<float> &r = ranked[li];
      r = replay->score.at(li);
      if (static_cast<int32_t>(r.size()) != L.n()) fail(Status::internal, "kvzip: one replay score per slot");
      const float keep = std::numeric_limits<float>::infinity();
      for (int32_t j = L.n() - policy_window(c, budgets[li], L.n()); j < L.n(); ++j) r[static_cast<size_t>(j)] = keep;
      for (const ProtectedSpan &sp : plan.spans) {
        if (sp.fair) continue;
        const std::pair<int32_t, int32_t> s = span_slots(L.pos, L.n(), sp);
        std::fill(r.begin() + s.first, r.begin() + s.second, keep);
      }
    }
    budgets = global_layer_budgets(ranked, counts, budgets, bs);
  }
  if (layer_share != nullptr) layer_share->assign(sc.layers.size(), 0.0);
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const LayerSlots &L = sc.layers[static_cast<size_t>(l)];
    LayerScoreInput in = layer_input(seq, l, plan.spans, rows);
    if (c.needs_replay()) in.replay = &replay->score[static_cast<size_t>(l)];
    in.window_probs = window_probs_;
    double share = 0;
    std::vector<int32_t> &k = plan.keep[static_cast<size_t>(l)];
    if (with_probe && budgets[static_cast<size_t>(l)] < L.n()) {
      // The policy's ranking and the probe's attention as SnapKV reads it (rows of `rows`): what either ranks high.
      const int32_t w = policy_window(c, budgets[static_cast<size_t>(l)], L.n());
      const std::vector<float> own = policy_scores(c, in, L.n() - w, w), probe = snapkv_scores(c, in, L.n() - w, w);
      k = select_with_scores(in, budgets[static_cast<size_t>(l)], w, rank_max(own, probe), false);
      share = dropped_share(own, k, false);  // by the policy's own measure, as select_keep reports it
    } else {
      k = select_keep(c, in, budgets[static_cast<size_t>(l)], &share);
    }
    plan.evicts = plan.evicts || static_cast<int32_t>(k.size()) < L.n();
    plan.evicted_share += share / hp.n_layer;
    if (layer_share != nullptr) (*layer_share)[static_cast<size_t>(l)] = share;
  }
  return plan;
}

void Compressor::layer_kv_f32(int32_t seq, int32_t layer, std::vector<float> &k, std::vector<float> &v) const {
  KvCache::HostLayer host;
  kv_.host_layer(seq, layer, host);
  const PagedKv &view = host.view;
  const int32_t kvh = view.n_kv_heads, hd = view.head_dim, n = view.n_slots;
  k.assign(static_cast<size_t>(n) * kvh * hd, 0.0f);
  v.assign(k.size(), 0.0f);
  for (int32_t j = 0; j < n; ++j)
    for (int32_t h = 0; h < kvh; ++h) {
      const size_t at = (static_cast<size_t>(j) * kvh + h) * hd;
      cpu::kv_read(k.data() + at, view, j, h, 0);
      cpu::kv_read(v.data() + at, view, j, h, 1);
    }
  const std::vector<float> &bk = model_.layer(layer).bk;  // keys as values (key norms): the bias back
  if (kv_keys_less_bias(view.dtype) && !bk.empty())
    for (int32_t j = 0; j < n; ++j)
      for (size_t i = 0; i < bk.size(); ++i) k[static_cast<size_t>(j) * bk.size() + i] += bk[i];
}

CompressionPlan Compressor::plan_auto(int32_t seq, int32_t B, double max_loss, const EvidenceRows &rows) {
  const CompressionConfig &c = config_;
  CompressionPlan plan;
  plan.spans = B > 0 ? spans_for_compression(seq, B, &plan.released_tokens) : state(seq).spans;
  const SeqCache &sc = kv_.seq(seq);
  const HParams &hp = model_.hparams();
  const int32_t bs = kv_.config().block_size;
  const auto L = static_cast<size_t>(hp.n_layer);
  // The window: as the fixed policies' for a byte budget; under a quality target, the configured one or 32.
  const int32_t w = B > 0 ? window_size(c, B) : quality_window();
  // What a uniform budget holds (the fixed policies' block rule included): the blocks auto may spread.
  int64_t total_blocks = 0, uniform_tokens = 0;
  if (B > 0) {
    const int32_t b = whole_block_budget(B, bs);
    for (const LayerSlots &Ls : sc.layers) {
      const int32_t keep = std::min(b, Ls.n());
      total_blocks += (keep + bs - 1) / bs;
      uniform_tokens += keep;
    }
  }
  std::vector<AutoLayerInput> inputs(L);
  for (size_t l = 0; l < L; ++l) {
    inputs[l].score = layer_input(seq, static_cast<int32_t>(l), plan.spans, rows);
    inputs[l].n_kv_heads = hp.n_head_kv;
  }
  std::vector<AutoLayerCurves> curves(L);
  // The second axis (DESIGN §9 "How precisely"): under a byte budget, for a question the window's rows stand for,
  // each layer may also be held at q8_0, on a backend that reads it, beside a float cache whose heads fit its blocks.
  const KvDtype base = kv_.config().dtype, low = KvDtype::q8_0;
  const bool probe = rows.own && rows.probe > 0;
  const bool precision = c.layer_precision && B > 0 && max_loss <= 0 && !kv_dtype_quantised(base) &&
                         kv_.slots_per_block(low) > kv_.config().block_size;
  std::vector<char> low_only(L, 0);
  for (size_t l = 0; l < L; ++l) low_only[l] = sc.layers[l].dtype == low ? 1 : 0;
  // Layers in parallel; the pool's workers must not throw, so the first error is carried out.
  std::mutex mu;
  std::exception_ptr failed;
  pool_.parallel_for(static_cast<int64_t>(L), 1, [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; ++l) {
      try {
        std::vector<float> k, v, k_low, v_low;
        layer_kv_f32(seq, static_cast<int32_t>(l), k, v);
        AutoLayerInput in = inputs[static_cast<size_t>(l)];
        in.k = k.data();
        in.v = v.data();
        const bool measure_low = precision && sc.layers[static_cast<size_t>(l)].dtype == base;
        if (measure_low) {
          round_layer(static_cast<int32_t>(l), low, k, v, k_low, v_low);
          in.k_low = k_low.data();
          in.v_low = v_low.data();
        }
        AutoLayerCurves cv = auto_measure_layer(c, in, w, kv_.layer_block_size(seq, static_cast<int32_t>(l)),
                                                measure_low ? kv_.slots_per_block(low) : 0);
        if (precision && low_only[static_cast<size_t>(l)]) cv.quant_loss = 0.0f;  // held there already
        curves[static_cast<size_t>(l)] = std::move(cv);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed) failed = std::current_exception();
      }
    }
  });
  if (failed) std::rethrow_exception(failed);
  // Under a byte budget no layer goes below kAutoLayerFloor of it (auto_policy.hpp says why); a quality target
  // with a budget as its ceiling takes as few tokens as the loss allows, without floors.
  std::vector<int32_t> floor_tokens;
  // With a profile set, each layer's floor follows the profile's layer shape (its share, clamped to [0.5, 1.5]).
  if (B > 0 && max_loss <= 0) {
    floor_tokens.assign(L, static_cast<int32_t>(kAutoLayerFloor * B));
    if (profile_guides_ && profile_)
      for (size_t l = 0; l < L; ++l) floor_tokens[l] = static_cast<int32_t>(kAutoLayerFloor * B * profile_->floor_factor(l));
  }
  // For a question asked later (a probe's rows) a byte budget stays uniform: the probe's held-out loss is no measure
  // of which layers a later question reads (measured: spread by it, auto at 12.5% found a fifth of the needles the
  // uniform spread found; packaging/docs/quality.md).
  std::vector<size_t> at;
  std::vector<char> held_low(L, 0);
  if (B > 0 && max_loss <= 0 && probe) {
    const int32_t b = whole_block_budget(B, bs);
    for (size_t l = 0; l < L; ++l) at.push_back(auto_uniform_index(curves[l], b, bs));
    if (precision) {
      // Each layer keeps its uniform blocks; in them it holds the tokens at the cache's precision, or as many more
      // as fit at q8_0 where that is clearly better by the layer's own held-out loss (a choice within the layer,
      // which the probe's rows can make, unlike one across layers).
      const int32_t lbs = kv_.slots_per_block(low);
      for (size_t l = 0; l < L; ++l) {
        const AutoLayerCurves &cv = curves[l];
        const int64_t blocks = (std::min(b, cv.n) + bs - 1) / bs;
        const size_t g_low = auto_uniform_index(cv, static_cast<int32_t>(std::min<int64_t>(INT32_MAX, blocks * lbs)), lbs);
        if (low_only[l]) {
          at[l] = g_low;
          held_low[l] = 1;
          continue;
        }
        const double lb = cv.best_loss(at[l]), la = static_cast<double>(cv.best_loss(g_low)) + cv.quant_loss;
        if (la < lb - std::max(0.1 * lb, static_cast<double>(kMinLossGain))) {
          at[l] = g_low;
          held_low[l] = 1;
        }
      }
    }
  } else {
    at = auto_spread(curves, bs, total_blocks, max_loss, floor_tokens);
  }
  if (B > 0 && max_loss <= 0 && !probe) {
    // The uniform spread (the same blocks per layer as the fixed policies) unless the chosen one is clearly better.
    const int32_t b = whole_block_budget(B, bs);
    std::vector<size_t> uni(L);
    for (size_t l = 0; l < L; ++l) uni[l] = auto_uniform_index(curves[l], b, bs);
    if (!auto_clearly_better(curves, at, uni)) at = std::move(uni);
    if (precision) {
      // Tokens and precision together, on the same blocks; kept only where clearly better than the choice above
      // (by the same rule as the spread against the uniform budgets).
      const std::vector<AutoPick> both = auto_spread_precision(curves, bs, kv_.slots_per_block(low), low_only, total_blocks, floor_tokens);
      std::vector<AutoPick> plain(L);
      for (size_t l = 0; l < L; ++l) plain[l] = {at[l], low_only[l] != 0};
      const double lb = auto_spread_loss(curves, plain), la = auto_spread_loss(curves, both);
      if (la < lb - std::max(0.1 * lb, static_cast<double>(kMinLossGain) * static_cast<double>(L)))
        for (size_t l = 0; l < L; ++l) {
          at[l] = both[l].g;
          held_low[l] = both[l].low ? 1 : 0;
        }
    }
  }
  plan.keep.resize(L);
  plan.report.layers.resize(L);
  plan.report.uniform_tokens = uniform_tokens;
  plan.report.max_loss = max_loss;
  for (size_t l = 0; l < L; ++l) {
    std::vector<int32_t> &k = plan.keep[l];
    AutoLayerChoice &ch = plan.report.layers[l];
    k = auto_select_layer(c, inputs[l], curves[l], at[l], &ch);
    if (held_low[l] && !low_only[l]) ch.loss += curves[l].quant_loss;
    plan.evicts = plan.evicts || static_cast<int32_t>(k.size()) < sc.layers[l].n();
    plan.report.loss += ch.loss / static_cast<double>(L);
    plan.report.tokens += static_cast<int64_t>(k.size());
  }
  // The loss the allocator compares sequences by: the proxy's (a relative error, 0..1 in practice).
  plan.evicted_share = plan.report.loss;
  if (std::find(held_low.begin(), held_low.end(), 1) != held_low.end()) {
    plan.dtype.resize(L);
    for (size_t l = 0; l < L; ++l) plan.dtype[l] = held_low[l] ? low : sc.layers[l].dtype;
  }
  return plan;
}

bool CompressionPlan::changes(const KvCache &kv, int32_t seq) const {
  if (evicts) return true;
  const SeqCache &s = kv.seq(seq);
  for (size_t l = 0; l < dtype.size() && l < s.layers.size(); ++l)
    if (dtype[l] != s.layers[l].dtype) return true;
  return false;
}

void Compressor::round_layer(int32_t layer, KvDtype dt, const std::vector<float> &k, const std::vector<float> &v,
                             std::vector<float> &k_low, std::vector<float> &v_low) const {
  const HParams &hp = model_.hparams();
  const int64_t hd = hp.head_dim;
  const std::vector<float> &bk = model_.layer(layer).bk;
  const bool less_bias = kv_keys_less_bias(dt) && !bk.empty();
  k_low.resize(k.size());
  v_low.resize(v.size());
  std::vector<uint8_t> q(static_cast<size_t>(kv_bytes(dt, hd)));
  std::vector<float> row(static_cast<size_t>(hd));
  const int64_t kvd = static_cast<int64_t>(hp.n_head_kv) * hd;
  for (size_t at = 0; at < k.size(); at += static_cast<size_t>(hd)) {
    const float *b = less_bias ? bk.data() + static_cast<int64_t>(at) % kvd : nullptr;
    for (int64_t i = 0; i < hd; ++i) row[static_cast<size_t>(i)] = k[at + static_cast<size_t>(i)] - (b != nullptr ? b[i] : 0.0f);
    cpu::convert(q.data(), dt, reinterpret_cast<const uint8_t *>(row.data()), KvDtype::f32, hd);
    cpu::convert(reinterpret_cast<uint8_t *>(k_low.data() + at), KvDtype::f32, q.data(), dt, hd);
    if (b != nullptr)
      for (int64_t i = 0; i < hd; ++i) k_low[at + static_cast<size_t>(i)] += b[i];
    cpu::convert(q.data(), dt, reinterpret_cast<const uint8_t *>(v.data() + at), KvDtype::f32, hd);
    cpu::convert(reinterpret_cast<uint8_t *>(v_low.data() + at), KvDtype::f32, q.data(), dt, hd);
  }
}

void Compressor::apply(int32_t seq, const CompressionPlan &plan) {
  SeqCompression &st = state_mut(seq);
  // Layers that change dtype are converted after the compaction (fewer rows to convert), each taking its new blocks
  // before it returns its old ones: checked first, so that neither step runs out of blocks half-way.
  std::vector<size_t> convert;
  if (!plan.dtype.empty()) {
    const SeqCache &s = kv_.seq(seq);
    int64_t free = kv_.free_blocks() + (plan.evicts ? kv_.blocks_freed_by(seq, plan.keep) : 0);
    for (size_t l = 0; l < plan.dtype.size() && l < s.layers.size(); ++l) {
      if (plan.dtype[l] == s.layers[l].dtype) continue;
      if (kv_.slots_per_block(plan.dtype[l]) < 1) fail(Status::internal, "compression plan: a layer dtype this cache cannot hold");
      const int64_t kept = static_cast<int64_t>(plan.keep[l].size()), take = kv_.blocks_holding(plan.dtype[l], kept);
      if (take > free)
        fail(Status::kv_full, "KV cache full: holding layer " + std::to_string(l) + " at " + kv_dtype_name(plan.dtype[l]) +
                                  " needs " + std::to_string(take) + " free blocks");
      // Its compacted blocks then go back, unless it shares some with a fork: those may stay the fork's, so such a
      // layer is counted as returning none (a bound that never promises blocks the conversion will not free).
      bool shared = false;
      for (int32_t b : s.layers[l].blocks) shared = shared || kv_.refcount(b) > 1;
      free += (shared ? 0 : kv_.blocks_holding(s.layers[l].dtype, kept)) - take;
      convert.push_back(l);
    }
  }
  if (plan.evicts) kv_.compact(seq, plan.keep);
  for (size_t l : convert) kv_.convert_layer(seq, static_cast<int32_t>(l), plan.dtype[l], model_.layer(static_cast<int32_t>(l)).bk);
  if (plan.released_tokens > 0) {
    st.spans = plan.spans;
    st.protected_released += plan.released_tokens;
  }
  st.auto_report = plan.report;  // empty when another policy compressed: the report is of the latest compression
  if (!plan.report.empty() && plan.report.uniform_tokens > 0 && plan.report.max_loss <= 0) {
    if (!profile_)
      profile_ = TuningProfile::empty(model_.weights_fingerprint(), model_.tokenizer().fingerprint(), model_.hparams().n_layer);
    profile_->refine(plan.report);
  }
  st.question = plan.question;
  st.probe_seconds = plan.probe_seconds;
  ++st.n_compressions;
  st.since_compress = 0;
}

void Compressor::set_profile(const TuningProfile &p) {
  p.validate();
  model_.check_made_with("tuning profile", p.weights_fingerprint, p.tokenizer_fingerprint);
  if (p.layers.size() != static_cast<size_t>(model_.hparams().n_layer))
    fail(Status::wrong_model, "tuning profile has " + std::to_string(p.layers.size()) + " layers; the model has " +
                                  std::to_string(model_.hparams().n_layer));
  profile_ = p;
  profile_guides_ = true;
}

void Compressor::compress(int32_t seq, int32_t budget_tokens, Question q, Occasion occasion) {
  apply(seq, plan(seq, budget_tokens, q, occasion));
}

bool Compressor::try_compress(int32_t seq, int32_t budget_tokens) {
  // A compaction that cannot copy its shared blocks (no free block) changes nothing: go on, as decode() does.
  try {
    compress(seq, budget_tokens, config_.question, Occasion::automatic);
    return true;
  } catch (const Error &e) {
    if (e.status() != Status::kv_full) throw;
    return false;
  }
}

void Compressor::observe(int32_t seq, const StepObservations &obs) {
  SeqCache &s = kv_.seq_mut(seq);
  const size_t n_new = obs.entropy.size();
  for (size_t l = 0; l < s.layers.size(); ++l) {
    LayerSlots &L = s.layers[l];
    for (int ch : {kChanAttnSum, kChanAttnCount}) {
      const auto &add = ch == kChanAttnSum ? obs.attn_sum : obs.attn_count;
      if (l >= add.size()) continue;
      std::vector<float> &dst = L.channels[static_cast<size_t>(ch)];
      for (size_t j = 0; j < add[l].size() && j < dst.size(); ++j) dst[j] += add[l][j];
    }
    if (n_new == 0 || l >= obs.rep_change.size() || static_cast<size_t>(L.n()) < n_new) continue;
    const size_t base = static_cast<size_t>(L.n()) - n_new;
    for (size_t j = 0; j < n_new; ++j) {
      L.channels[kChanEntropy][base + j] = obs.entropy[j];
      L.channels[kChanRepChange][base + j] = obs.rep_change[l][j];
    }
  }
}

void Compressor::compress_over_budget(const std::vector<int32_t> &due) {
  for (int32_t id : due) {
    // The step is committed by now, so its status must be OK. Compacting a sequence that shares blocks with a fork
    // needs fresh blocks for the copies; when the pool has none, compact() refuses before touching anything, and
    // the sequence simply stays over budget: since_compress is kept, so the next step tries again.
    if (max_kept(id) > budget_for(id) && !try_compress(id, 0)) continue;
    state_mut(id).since_compress = 0;
  }
}

bool Compressor::pressure_candidate(int32_t id, int32_t n_new, PressureCandidate *out) {
  if (max_kept(id) <= budget_for(id)) return false;
  PressureCandidate cand;
  cand.seq = id;
  cand.plan = plan(id, 0, config_.question, Occasion::automatic);
  if (!cand.plan.changes(kv_, id)) return false;
  // What compressing it frees, less what the step's own tokens for it would need afterwards beyond what they
  // need now (a compacted last block may have more or less room than the current one).
  cand.blocks = kv_.blocks_freed_by(id, cand.plan.keep, &cand.plan.dtype);
  if (n_new > 0) cand.blocks += kv_.blocks_needed({id}, {n_new}) - kv_.blocks_needed_after(id, cand.plan.keep, n_new, &cand.plan.dtype);
  if (cand.blocks <= 0) return false;
  cand.cost_per_block = cand.plan.evicted_share / static_cast<double>(cand.blocks);
  *out = std::move(cand);
  return true;
}

PressureCandidate Compressor::pressure_estimate(int32_t seq) {
  state(seq);  // not_found for an unknown sequence
  PressureCandidate cand;
  cand.seq = seq;
  if (!config_.enabled()) return cand;
  PressureCandidate found;
  if (pressure_candidate(seq, 0, &found)) cand = std::move(found);
  return cand;
}

PressureCandidate Compressor::estimate(int32_t seq, int32_t budget_tokens, Question q) {
  state(seq);  // not_found for an unknown sequence
  if (budget_tokens <= 0) fail(Status::invalid_argument, "estimate: budget_tokens must be positive");
  PressureCandidate cand;
  cand.seq = seq;
  cand.plan = plan(seq, budget_tokens, q, Occasion::automatic);
  if (!cand.plan.changes(kv_, seq)) return cand;
  cand.blocks = kv_.blocks_freed_by(seq, cand.plan.keep, &cand.plan.dtype);
  if (cand.blocks > 0) cand.cost_per_block = cand.plan.evicted_share / static_cast<double>(cand.blocks);
  else cand.blocks = 0;
  return cand;
}

std::vector<PressureCandidate> Compressor::pressure_candidates(const std::map<int32_t, int32_t> &appending, int32_t only) {
  std::vector<PressureCandidate> out;
  for (int32_t id : kv_.sequence_ids()) {
    if (only >= 0 && id != only) continue;
    const auto it = appending.find(id);
    PressureCandidate cand;
    if (pressure_candidate(id, it == appending.end() ? 0 : it->second, &cand)) out.push_back(std::move(cand));
  }
  // Cheapest loss per freed block first; ties: more blocks, then the lower id (deterministic).
  std::sort(out.begin(), out.end(), [](const PressureCandidate &a, const PressureCandidate &b) {
    if (a.cost_per_block != b.cost_per_block) return a.cost_per_block < b.cost_per_block;
    if (a.blocks != b.blocks) return a.blocks > b.blocks;
    return a.seq < b.seq;
  });
  return out;
}

void Compressor::relieve_pressure(const std::map<int32_t, int32_t> &appending, int64_t need, int32_t only) {
  const std::vector<PressureCandidate> cands = pressure_candidates(appending, only);
  // Each estimate holds under the current reference counts; compacting one sequence can only lower the counts
  // another sees (fewer copies, more frees), so the sum is a lower bound of what the chosen set frees together.
  int64_t have = kv_.free_blocks();
  size_t n_pick = 0;
  while (have < need && n_pick < cands.size()) have += cands[n_pick++].blocks;
  if (have < need) {
    int64_t all = kv_.free_blocks();
    for (const PressureCandidate &c : cands) all += c.blocks;
    fail(Status::kv_full, "KV cache full: this step needs " + std::to_string(need) + " blocks; " +
                              std::to_string(kv_.free_blocks()) + " are free and compressing every sequence over its budget (" +
                              std::to_string(cands.size()) + ") would leave " + std::to_string(all) + " (pool of " +
                              std::to_string(kv_.stats().blocks_total) + "); nothing was compressed");
  }
  for (size_t i = 0; i < n_pick; ++i) apply(cands[i].seq, cands[i].plan);
}

double Compressor::held_tokens(const LayerSlots &L) const {
  const KvDtype base = kv_.config().dtype;
  if (L.dtype == base) return static_cast<double>(L.n());
  const int32_t hd = kv_.config().head_dim;
  return static_cast<double>(L.n()) * static_cast<double>(kv_bytes(L.dtype, hd)) / static_cast<double>(kv_bytes(base, hd));
}

double Compressor::mean_kept(int32_t seq) const {
  const SeqCache &c = kv_.seq(seq);
  if (c.layers.empty()) return 0;
  double sum = 0;
  for (const LayerSlots &L : c.layers) sum += held_tokens(L);
  return sum / static_cast<double>(c.layers.size());
}

int32_t Compressor::max_kept(int32_t seq) const {
  double kept = 0;
  for (const LayerSlots &L : kv_.seq(seq).layers) kept = std::max(kept, held_tokens(L));
  return static_cast<int32_t>(std::ceil(kept));
}

int32_t Compressor::slack_for(int32_t budget_tokens) const {
  const int32_t bs = kv_.config().block_size;
  const auto want = static_cast<int64_t>(std::ceil(kSlackShare * static_cast<double>(budget_tokens)));
  const int64_t blocks = std::max<int64_t>(1, (want + bs - 1) / bs);
  return static_cast<int32_t>(std::min<int64_t>(INT32_MAX / 2, blocks * bs));
}

bool Compressor::compression_due(int32_t seq) const {
  const CompressionConfig &c = config_;
  if (!c.enabled()) return false;
  const SeqCompression &st = state(seq);
  if (c.step_interval()) return st.since_compress >= c.interval;
  const double kept = mean_kept(seq);
  if (c.has_budget()) {
    const int32_t B = budget_for(seq);
    if (kept > static_cast<double>(B) + slack_for(B)) return true;
  }
  return c.quality_target() && st.since_compress > quality_slack(seq);
}

int64_t Compressor::quality_slack(int32_t seq) const {
  // Growth since the latest compression, against the slack of what it kept (at least the window).
  const double base = std::max(mean_kept(seq) - static_cast<double>(state(seq).since_compress), 1.0 * window_capacity());
  return slack_for(static_cast<int32_t>(std::min<double>(INT32_MAX, base)));
}

Compressor::Bound Compressor::bound(int32_t seq) const {
  const CompressionConfig &c = config_;
  Bound b;
  state(seq);  // not_found for an unknown sequence
  if (!c.enabled()) return b;
  if (c.has_budget()) b.budget = budget_for(seq);
  if (c.step_interval()) b.slack = c.interval;
  else b.slack = c.has_budget() ? slack_for(static_cast<int32_t>(b.budget)) : quality_slack(seq);
  return b;
}

int64_t Compressor::protected_tokens(int32_t seq) const {
  const int64_t len = kv_.seq(seq).length;
  int64_t n = 0;
  for (const ProtectedSpan &sp : state(seq).spans)
    if (!sp.fair) n += std::max<int64_t>(0, std::min(sp.end, len) - sp.begin);
  return n;
}

int64_t Compressor::tokens_until_compression(int32_t seq) const {
  const CompressionConfig &c = config_;
  const SeqCompression &st = state(seq);
  if (!c.enabled()) return INT64_MAX;
  const double kept = mean_kept(seq);
  // The fixed schedule: every `interval` tokens (maybe_compress_after then compresses if over the budget).
  if (c.step_interval()) return std::max<int64_t>(0, c.interval - st.since_compress);
  int64_t until = INT64_MAX;
  if (c.has_budget()) {
    const int64_t len = kv_.seq(seq).length;
    const int32_t B = budget_for(seq);
    const double excess = kept - (static_cast<double>(B) + slack_for(B));
    if (excess > 0) return 0;
    // Each token appended adds one to what is held, and to budget + slack about budget_fraction x 1.25 (a fraction
    // of 0.8 or more grows its bound as fast as the sequence: it is never over it again).
    const double growth = c.budget_tokens > 0 ? 1.0 : 1.0 - c.budget_fraction * (1.0 + kSlackShare);
    const auto over = [&](int64_t a) {
      const int32_t Ba = budget_at(len + a);
      return kept + static_cast<double>(a) > static_cast<double>(Ba) + slack_for(Ba);
    };
    if (growth > 1e-3) {
      // The estimate ignores the budget's rounding and the slack's whole blocks: walk to the first length over.
      int64_t a = std::max<int64_t>(1, static_cast<int64_t>(std::floor(-excess / growth)));
      while (a > 1 && over(a - 1)) --a;
      for (int64_t steps = 0; !over(a) && steps < (int64_t{1} << 20); ++steps) ++a;
      if (over(a)) until = a;
    }
  }
  if (c.quality_target()) until = std::min(until, std::max<int64_t>(0, quality_slack(seq) + 1 - st.since_compress));
  return until;
}

int32_t Compressor::window_capacity() const { return std::max(defaults::max_window, config_.window); }

int32_t Compressor::quality_window() const { return config_.window >= 0 ? config_.window : defaults::max_window; }

int64_t Compressor::window_rows_needed(int32_t seq) const {
  const SeqCache &c = kv_.seq(seq);
  const auto rows = static_cast<int64_t>(c.window_pos.size());
  if (!config_.enabled() || !config_.needs_window_queries() || rows == 0) return 0;
  // The fewest tokens before the next compression the trigger schedules (memory or a fixed interval), each of
  // which adds a row of its own.
  const int64_t ahead = std::min<int64_t>(rows, tokens_until_compression(seq));
  int64_t w = 0;
  if (!config_.has_budget()) {
    w = quality_window();
  } else {
    std::vector<int32_t> counts;
    for (const LayerSlots &L : c.layers) counts.push_back(static_cast<int32_t>(std::min<int64_t>(INT32_MAX, L.n() + ahead)));
    for (int32_t b : layer_budgets(config_, counts, budget_at(c.length + ahead))) w = std::max<int64_t>(w, kept_window(config_, b));
  }
  return std::min(rows, std::max<int64_t>(0, w - ahead));
}

}  // namespace infokv
