#include "compress/auto_policy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.hpp"

namespace infokv {

namespace {

// q . k with eight independent partial sums, so that the compiler can vectorise it without reassociating.
inline float dot(const float *a, const float *b, int32_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int32_t l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// Rows of the observation window held out to measure the loss: the latest ones, up to 8 and at most half.
int32_t held_out_rows(int32_t rows) { return std::max(1, std::min(8, rows / 2)); }

struct WindowProbs {
  int32_t rows = 0;              // query rows used (the latest ones)
  int32_t probe = 0;             // the last `probe` of them are a probe question's (LayerScoreInput::probe_rows)
  std::vector<int32_t> vis;      // [rows]: slots each row sees
  std::vector<float> p;          // [rows][n_heads][n]: attention probabilities per head
};

WindowProbs window_probs_per_head(const AutoLayerInput &in, int32_t rows_wanted) {
  const LayerScoreInput &s = in.score;
  const LayerSlots &S = *s.slots;
  const int32_t n = S.n(), nh = s.n_heads, hd = s.head_dim, kvh = in.n_kv_heads;
  const int32_t group = std::max(1, nh / std::max(1, kvh));
  const int32_t qd = nh * hd;
  const auto have = static_cast<int32_t>(s.window_pos->size());
  WindowProbs w;
  w.rows = std::max(0, std::min(rows_wanted, have));
  w.probe = std::min(w.rows, s.probe_rows);
  w.vis.resize(static_cast<size_t>(w.rows));
  w.p.assign(static_cast<size_t>(w.rows) * static_cast<size_t>(nh) * static_cast<size_t>(n), 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> logit(static_cast<size_t>(n));
  for (int32_t r = 0; r < w.rows; ++r) {
    const int32_t src = have - w.rows + r;
    const int32_t pos = (*s.window_pos)[static_cast<size_t>(src)];
    const auto vis = static_cast<int32_t>(std::upper_bound(S.pos.begin(), S.pos.end(), pos) - S.pos.begin());
    w.vis[static_cast<size_t>(r)] = vis;
    const float *q = s.window_q->data() + static_cast<int64_t>(src) * qd;
    for (int32_t h = 0; h < nh; ++h) {
      const float *qh = q + static_cast<int64_t>(h) * hd;
      const int32_t kh = std::min(kvh - 1, h / group);
      float mx = -INFINITY;
      for (int32_t j = 0; j < vis; ++j) {
        const float d = dot(qh, in.k + (static_cast<int64_t>(j) * kvh + kh) * hd, hd) * scale;
        logit[static_cast<size_t>(j)] = d;
        mx = std::max(mx, d);
      }
      float *pr = w.p.data() + (static_cast<int64_t>(r) * nh + h) * n;
      double z = 0;
      for (int32_t j = 0; j < vis; ++j) {
        pr[j] = std::exp(logit[static_cast<size_t>(j)] - mx);
        z += pr[j];
      }
      if (z > 0)
        for (int32_t j = 0; j < vis; ++j) pr[j] = static_cast<float>(pr[j] / z);
    }
  }
  return w;
}

// The rows `keep` of w (ascending), as a WindowProbs of their own (the probe's among them stay last).
WindowProbs select_rows(const WindowProbs &w, const std::vector<int32_t> &keep, int32_t nh, int32_t n) {
  WindowProbs out;
  out.rows = static_cast<int32_t>(keep.size());
  const size_t stride = static_cast<size_t>(nh) * static_cast<size_t>(n);
  for (int32_t r : keep) {
    out.vis.push_back(w.vis[static_cast<size_t>(r)]);
    out.p.insert(out.p.end(), w.p.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * stride),
                 w.p.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r + 1) * stride));
    out.probe += r >= w.rows - w.probe ? 1 : 0;
  }
  return out;
}

// What the rows [r0, r1) attend to among the first n_cand slots. The window's rows: the mean over heads and rows of
// the probabilities each slot receives. A probe's rows: per head the mean over its rows, normalised over the
// candidates, then the most any head gives (a later question is answered by a few retrieval heads, and the mean over
// all of them dilutes what one of them reads: packaging/docs/quality.md, "Pooling a probe's attention"). With both,
// the two are combined by rank_max (as window_attention combines them).
std::vector<float> rows_attention(const WindowProbs &w, int32_t nh, int32_t n, int32_t n_cand, int32_t r0, int32_t r1) {
  const int32_t first_probe = w.rows - w.probe;
  std::vector<float> window(static_cast<size_t>(n_cand), 0.0f);
  std::vector<float> heads(static_cast<size_t>(w.probe > 0 ? nh * n_cand : 0), 0.0f);  // [head][slot], the probe's
  int32_t used[2] = {0, 0};
  for (int32_t r = r0; r < r1; ++r) {
    if (w.vis[static_cast<size_t>(r)] == 0) continue;
    const bool probe = r >= first_probe;
    ++used[probe ? 1 : 0];
    for (int32_t h = 0; h < nh; ++h) {
      const float *pr = w.p.data() + (static_cast<int64_t>(r) * nh + h) * n;
      float *to = probe ? heads.data() + static_cast<int64_t>(h) * n_cand : window.data();
      for (int32_t j = 0; j < n_cand; ++j) to[j] += pr[j];
    }
  }
  if (used[0] > 0)
    for (float &v : window) v /= static_cast<float>(used[0] * nh);
  if (used[1] == 0) return window;  // the window alone
  std::vector<float> probe(static_cast<size_t>(n_cand), 0.0f);
  for (int32_t h = 0; h < nh; ++h) {
    const float *a = heads.data() + static_cast<int64_t>(h) * n_cand;
    double sum = 0;
    for (int32_t j = 0; j < n_cand; ++j) sum += a[j];
    if (sum <= 0) continue;
    for (int32_t j = 0; j < n_cand; ++j)
      probe[static_cast<size_t>(j)] = std::max(probe[static_cast<size_t>(j)], static_cast<float>(a[j] / sum));
  }
  // The window's rows and the probe's (Question::both): what either ranks high, as window_attention combines them.
  return used[0] > 0 ? rank_max(window, probe) : probe;
}

// Every kind of evidence's scores over the candidates, from the window rows [r0, r1).
std::vector<std::vector<float>> evidence_scores(const CompressionConfig &c, const AutoLayerInput &in, const WindowProbs &w,
                                                int32_t n_cand, int32_t r0, int32_t r1) {
  const LayerScoreInput &s = in.score;
  const LayerSlots &S = *s.slots;
  const int32_t n = S.n(), nh = s.n_heads, hd = s.head_dim, kvh = in.n_kv_heads;
  std::vector<std::vector<float>> out(static_cast<size_t>(kEvidenceKinds), std::vector<float>(static_cast<size_t>(n_cand), 0.0f));
  std::vector<float> a = pool_and_normalise(rows_attention(w, nh, n, n_cand, r0, r1), pool_kernel(c, s));
  {
    std::vector<float> d(S.channels[kChanRepChange].begin(), S.channels[kChanRepChange].begin() + n_cand);
    std::vector<float> h(S.channels[kChanEntropy].begin(), S.channels[kChanEntropy].begin() + n_cand);
    out[static_cast<size_t>(Evidence::infokv)] = infokv_mix(a, d, h, c.alpha, c.tau);
  }
  out[static_cast<size_t>(Evidence::window_attention)] = std::move(a);
  for (int32_t j = 0; j < n_cand; ++j) {
    const float cnt = S.channels[kChanAttnCount][static_cast<size_t>(j)];
    out[static_cast<size_t>(Evidence::accumulated_attention)][static_cast<size_t>(j)] =
        cnt > 0 ? S.channels[kChanAttnSum][static_cast<size_t>(j)] / cnt : 0.0f;
  }
  if (r1 > r0) out[static_cast<size_t>(Evidence::last_query)] = rows_attention(w, nh, n, n_cand, r1 - 1, r1);
  for (int32_t j = 0; j < n_cand; ++j)
    out[static_cast<size_t>(Evidence::recency)][static_cast<size_t>(j)] = j < c.sink ? INFINITY : static_cast<float>(j);
  for (int32_t j = 0; j < n_cand; ++j) {
    double sq = 0;
    for (int32_t t = 0; t < kvh * hd; ++t) {
      const float x = in.k[static_cast<int64_t>(j) * kvh * hd + t];
      sq += static_cast<double>(x) * x;
    }
    out[static_cast<size_t>(Evidence::key_norm)][static_cast<size_t>(j)] = -static_cast<float>(std::sqrt(sq / kvh));
  }
  return out;
}

// Candidates (not always kept) in rank order: highest score first, ties to the later slot.
std::vector<int32_t> rank_order(const std::vector<float> &score, const std::vector<char> &fixed) {
  std::vector<int32_t> idx;
  for (int32_t j = 0; j < static_cast<int32_t>(score.size()); ++j)
    if (!fixed[static_cast<size_t>(j)]) idx.push_back(j);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const float sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a > b;
  });
  return idx;
}

}  // namespace

const char *evidence_name(Evidence e) {
  switch (e) {
    case Evidence::window_attention: return "window_attention";
    case Evidence::infokv: return "infokv";
    case Evidence::accumulated_attention: return "accumulated_attention";
    case Evidence::last_query: return "last_query";
    case Evidence::recency: return "recency";
    case Evidence::key_norm: return "key_norm";
    case Evidence::replay: return "replay";
  }
  return "unknown";
}

float AutoLayerCurves::best_loss(size_t g, Evidence *which) const {
  // Window attention unless another evidence beats the best so far by kEvidenceMargin (see the header).
  float best = INFINITY;
  if (!loss.empty()) {
    best = loss[0][g];
    if (which != nullptr) *which = static_cast<Evidence>(0);
  }
  for (size_t e = 1; e < loss.size(); ++e) {
    if (loss[e][g] < best * (1.0f - kEvidenceMargin) && loss[e][g] < best - kMinLossGain) {
      best = loss[e][g];
      if (which != nullptr) *which = static_cast<Evidence>(e);
    }
  }
  return best;
}

AutoLayerCurves auto_measure_layer(const CompressionConfig &c, const AutoLayerInput &in, int32_t window, int32_t block_size,
                                   int32_t low_block_size) {
  const LayerScoreInput &s = in.score;
  const LayerSlots &S = *s.slots;
  const int32_t n = S.n(), nh = s.n_heads, hd = s.head_dim, kvh = in.n_kv_heads;
  const int32_t group = std::max(1, nh / std::max(1, kvh));
  AutoLayerCurves cv;
  cv.n = n;
  cv.window = std::max(0, std::min(window, n));
  const int32_t n_cand = n - cv.window;
  // Always kept: the window and the never-evicted spans.
  std::vector<char> fixed(static_cast<size_t>(n_cand), 0);
  if (s.spans != nullptr) {
    for (const ProtectedSpan &sp : *s.spans) {
      if (sp.fair) continue;
      const std::pair<int32_t, int32_t> r = span_slots(S.pos, n_cand, sp);
      std::fill(fixed.begin() + r.first, fixed.begin() + r.second, 1);
    }
  }
  const int32_t n_fixed = cv.window + static_cast<int32_t>(std::count(fixed.begin(), fixed.end(), 1));
  cv.grid.push_back(n_fixed);
  for (int32_t b = (n_fixed / block_size + 1) * block_size; b < n; b += block_size) cv.grid.push_back(b);
  if (low_block_size > 0 && in.k_low != nullptr) {
    for (int32_t b = (n_fixed / low_block_size + 1) * low_block_size; b < n; b += low_block_size) cv.grid.push_back(b);
    std::sort(cv.grid.begin() + 1, cv.grid.end());
    cv.grid.erase(std::unique(cv.grid.begin(), cv.grid.end()), cv.grid.end());
  }
  if (n > n_fixed) cv.grid.push_back(n);

  const WindowProbs w = window_probs_per_head(in, std::max(cv.window, 1) + s.probe_rows);
  // The held-out rows: the latest ones; with a probe question (a question asked later), every other row of the
  // probe, spread over it (its latest rows are the template's generation prompt, which attends mostly nearby).
  std::vector<int32_t> held, scoring;
  if (w.probe > 1) {
    const int32_t p0 = w.rows - w.probe, want = std::min(8, w.probe / 2);
    std::vector<char> is_held(static_cast<size_t>(w.rows), 0);
    for (int32_t k = 0; k < want; ++k) is_held[static_cast<size_t>(p0 + (2 * k + 1) * w.probe / (2 * want))] = 1;
    for (int32_t r = 0; r < w.rows; ++r) (is_held[static_cast<size_t>(r)] ? held : scoring).push_back(r);
  } else {
    const int32_t H0 = w.rows > 1 ? held_out_rows(w.rows) : w.rows;
    for (int32_t r = 0; r < w.rows; ++r) (r >= w.rows - H0 && w.rows > 1 ? held : scoring).push_back(r);
    if (w.rows == 1) held = scoring;
  }
  const auto H = static_cast<int32_t>(held.size());
  cv.scores = evidence_scores(c, in, w, n_cand, 0, w.rows);
  std::vector<std::vector<float>> ranked_by;
  if (scoring.empty() || static_cast<int32_t>(scoring.size()) == w.rows) {
    ranked_by = cv.scores;
  } else {
    const WindowProbs ws = select_rows(w, scoring, nh, n);
    ranked_by = evidence_scores(c, in, ws, n_cand, 0, ws.rows);
  }

  // The held-out rows' probabilities, slot-major for the pass below, and their full outputs.
  const int32_t E = H * nh;  // (row, head) pairs
  std::vector<float> pe(static_cast<size_t>(n) * static_cast<size_t>(E), 0.0f);
  for (int32_t r = 0; r < H; ++r)
    for (int32_t h = 0; h < nh; ++h) {
      const float *pr = w.p.data() + (static_cast<int64_t>(held[static_cast<size_t>(r)]) * nh + h) * n;
      for (int32_t j = 0; j < n; ++j) pe[static_cast<size_t>(j) * E + r * nh + h] = pr[j];
    }
  // Sums of p v over up to n slots with p <= 1: float holds them well enough for losses of 1e-5 and up.
  std::vector<float> full(static_cast<size_t>(E) * hd, 0.0f), base(static_cast<size_t>(E) * hd, 0.0f);
  std::vector<float> zbase(static_cast<size_t>(E), 0.0f);
  auto add_slot = [&](std::vector<float> &num, std::vector<float> *z, int32_t j) {
    const float *pj = pe.data() + static_cast<size_t>(j) * E;
    for (int32_t e = 0; e < E; ++e) {
      const float p = pj[e];
      if (p == 0.0f) continue;
      const float *v = in.v + (static_cast<int64_t>(j) * kvh + std::min(kvh - 1, (e % nh) / group)) * hd;
      float *o = num.data() + static_cast<size_t>(e) * hd;
      for (int32_t t = 0; t < hd; ++t) o[t] += p * v[t];
      if (z != nullptr) (*z)[static_cast<size_t>(e)] += p;
    }
  };
  for (int32_t j = 0; j < n; ++j) add_slot(full, nullptr, j);
  for (int32_t j = 0; j < n; ++j)
    if (j >= n_cand || fixed[static_cast<size_t>(j)]) add_slot(base, &zbase, j);
  double norm = 0;
  for (float x : full) norm += static_cast<double>(x) * x;
  norm = std::max(norm, 1e-30);
  if (in.k_low != nullptr && in.v_low != nullptr && H > 0) {
    // The held-out rows over the whole layer at the lower precision: their probabilities from the rounded keys,
    // their outputs from the rounded values.
    AutoLayerInput low = in;
    low.k = in.k_low;
    const WindowProbs wl = window_probs_per_head(low, w.rows);
    double err = 0;
    std::vector<float> o(static_cast<size_t>(hd));
    for (int32_t r = 0; r < H; ++r)
      for (int32_t h = 0; h < nh; ++h) {
        const float *pr = wl.p.data() + (static_cast<int64_t>(held[static_cast<size_t>(r)]) * nh + h) * n;
        std::fill(o.begin(), o.end(), 0.0f);
        for (int32_t j = 0; j < n; ++j) {
          if (pr[j] == 0.0f) continue;
          const float *v = in.v_low + (static_cast<int64_t>(j) * kvh + std::min(kvh - 1, h / group)) * hd;
          for (int32_t t = 0; t < hd; ++t) o[static_cast<size_t>(t)] += pr[j] * v[t];
        }
        const float *f = full.data() + static_cast<size_t>(r * nh + h) * hd;
        for (int32_t t = 0; t < hd; ++t) {
          const double d = static_cast<double>(f[t]) - o[static_cast<size_t>(t)];
          err += d * d;
        }
      }
    cv.quant_loss = static_cast<float>(err / norm);
  }
  auto loss_of = [&](const std::vector<float> &num, const std::vector<float> &z) {
    double err = 0;
    for (int32_t e = 0; e < E; ++e) {
      const float zz = z[static_cast<size_t>(e)];
      const float inv = zz > 0 ? 1.0f / zz : 0.0f;
      const float *o = num.data() + static_cast<size_t>(e) * hd, *f = full.data() + static_cast<size_t>(e) * hd;
      float s = 0;
      for (int32_t t = 0; t < hd; ++t) {
        const float d = f[t] - o[t] * inv;
        s += d * d;
      }
      err += s;
    }
    return static_cast<float>(err / norm);
  };

  cv.loss.assign(static_cast<size_t>(kEvidenceKinds), std::vector<float>(cv.grid.size(), 0.0f));
  for (int32_t ev = 0; ev < kEvidenceKinds; ++ev) {
    std::vector<float> &curve = cv.loss[static_cast<size_t>(ev)];
    if (H == 0) continue;  // no window rows: nothing to measure, every evidence looks alike
    if (ev == static_cast<int32_t>(Evidence::replay)) continue;  // not measured here (below)
    const std::vector<int32_t> order = rank_order(ranked_by[static_cast<size_t>(ev)], fixed);
    std::vector<float> num = base, z = zbase;
    size_t g = 0;
    int32_t kept = n_fixed;
    curve[g++] = loss_of(num, z);
    for (int32_t j : order) {
      add_slot(num, &z, j);
      ++kept;
      if (g < cv.grid.size() && kept == cv.grid[g]) curve[g++] = loss_of(num, z);
    }
  }
  const auto never = [&cv](Evidence e) {
    std::fill(cv.loss[static_cast<size_t>(e)].begin(), cv.loss[static_cast<size_t>(e)].end(), INFINITY);
  };
  // For a question asked later the latest query is the probe's last markup token, no evidence of anything.
  if (s.probe_rows > 0) never(Evidence::last_query);
  never(Evidence::replay);  // not measured here: Compressor::plan_auto_replay uses it as a whole plan
  return cv;
}

std::vector<size_t> auto_spread(const std::vector<AutoLayerCurves> &layers, int32_t block_size, int64_t total_blocks,
                                double max_loss, const std::vector<int32_t> &floor) {
  const size_t L = layers.size();
  auto blocks = [&](int32_t tokens) { return static_cast<int64_t>((tokens + block_size - 1) / block_size); };
  std::vector<size_t> at(L, 0);
  int64_t used = 0;
  double loss_sum = 0;
  for (size_t l = 0; l < L; ++l) {
    const AutoLayerCurves &cv = layers[l];
    const int32_t fl = l < floor.size() ? floor[l] : 0;
    while (at[l] + 1 < cv.grid.size() && cv.grid[at[l]] < fl) ++at[l];
    used += blocks(cv.grid[at[l]]);
    loss_sum += cv.best_loss(at[l]);
  }
  // A quality target (max_loss > 0) stops as soon as the mean loss holds it; a block cap (total_blocks > 0) bounds
  // either kind.
  const bool target = max_loss > 0;
  const bool capped = total_blocks > 0;
  // Greedy on the lower convex hull: the move (one layer to a larger budget, up to kLook grid steps ahead) that
  // lowers the loss most per block, while it fits.
  constexpr size_t kLook = 16;
  while (true) {
    if (target && loss_sum <= max_loss * static_cast<double>(L)) break;
    double best_rate = -INFINITY;
    size_t best_l = L, best_g = 0;
    for (size_t l = 0; l < L; ++l) {
      const AutoLayerCurves &cv = layers[l];
      const float cur = cv.best_loss(at[l]);
      for (size_t g = at[l] + 1; g < cv.grid.size() && g <= at[l] + kLook; ++g) {
        const int64_t extra = blocks(cv.grid[g]) - blocks(cv.grid[at[l]]);
        if (capped && used + extra > total_blocks) break;
        const double rate = (static_cast<double>(cur) - cv.best_loss(g)) / static_cast<double>(std::max<int64_t>(extra, 1));
        if (rate > best_rate) {
          best_rate = rate;
          best_l = l;
          best_g = g;
        }
      }
    }
    if (best_l == L) break;
    const AutoLayerCurves &cv = layers[best_l];
    used += blocks(cv.grid[best_g]) - blocks(cv.grid[at[best_l]]);
    loss_sum += static_cast<double>(cv.best_loss(best_g)) - cv.best_loss(at[best_l]);
    at[best_l] = best_g;
  }
  return at;
}

std::vector<AutoPick> auto_spread_precision(const std::vector<AutoLayerCurves> &layers, int32_t block_size, int32_t low_block_size,
                                            const std::vector<char> &low_only, int64_t total_blocks,
                                            const std::vector<int32_t> &floor) {
  struct Option {
    int64_t blocks;
    double loss;
    AutoPick pick;
  };
  const size_t L = layers.size();
  // Each layer's options, cheapest first, pruned to those that lower the loss (the lower envelope).
  std::vector<std::vector<Option>> opts(L);
  for (size_t l = 0; l < L; ++l) {
    const AutoLayerCurves &cv = layers[l];
    const int32_t fl = l < floor.size() ? floor[l] : 0;
    const bool only_low = l < low_only.size() && low_only[l] != 0;
    std::vector<Option> all;
    for (size_t g = 0; g < cv.grid.size(); ++g) {
      if (cv.grid[g] < fl && g + 1 < cv.grid.size()) continue;  // under the floor (the whole layer always allowed)
      const double base = cv.best_loss(g);
      if (!only_low) all.push_back({(cv.grid[g] + block_size - 1) / block_size, base, {g, false}});
      if (std::isfinite(cv.quant_loss) && low_block_size > 0)
        all.push_back({(cv.grid[g] + low_block_size - 1) / low_block_size, base + cv.quant_loss, {g, true}});
    }
    std::stable_sort(all.begin(), all.end(), [](const Option &a, const Option &b) {
      return a.blocks != b.blocks ? a.blocks < b.blocks : a.loss < b.loss;
    });
    for (const Option &o : all)
      if (opts[l].empty() || o.loss < opts[l].back().loss) opts[l].push_back(o);
  }
  // Greedy on the envelopes, as auto_spread: the move that lowers the loss most per block while it fits.
  std::vector<size_t> at(L, 0);
  int64_t used = 0;
  for (size_t l = 0; l < L; ++l)
    if (!opts[l].empty()) used += opts[l][0].blocks;
  constexpr size_t kLook = 16;
  while (true) {
    double best_rate = -INFINITY;
    size_t best_l = L, best_i = 0;
    for (size_t l = 0; l < L; ++l) {
      const std::vector<Option> &o = opts[l];
      for (size_t i = at[l] + 1; i < o.size() && i <= at[l] + kLook; ++i) {
        const int64_t extra = o[i].blocks - o[at[l]].blocks;
        if (total_blocks > 0 && used + extra > total_blocks) break;
        const double rate = (o[at[l]].loss - o[i].loss) / static_cast<double>(std::max<int64_t>(extra, 1));
        if (rate > best_rate) {
          best_rate = rate;
          best_l = l;
          best_i = i;
        }
      }
    }
    if (best_l == L) break;
    used += opts[best_l][best_i].blocks - opts[best_l][at[best_l]].blocks;
    at[best_l] = best_i;
  }
  std::vector<AutoPick> out(L);
  for (size_t l = 0; l < L; ++l)
    if (!opts[l].empty()) out[l] = opts[l][at[l]].pick;
  return out;
}

double auto_spread_loss(const std::vector<AutoLayerCurves> &layers, const std::vector<AutoPick> &at) {
  double s = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    s += static_cast<double>(layers[l].best_loss(at[l].g)) + (at[l].low ? static_cast<double>(layers[l].quant_loss) : 0.0);
  return s;
}

size_t auto_uniform_index(const AutoLayerCurves &cv, int32_t tokens, int32_t block_size) {
  const int64_t filled = (static_cast<int64_t>(std::max(tokens, 0)) + block_size - 1) / block_size * block_size;
  size_t g = 0;
  while (g + 1 < cv.grid.size() && cv.grid[g] < std::min<int64_t>(filled, cv.n)) ++g;
  // A grid point past the uniform blocks (an unaligned always-kept set) falls back one if that one is in them.
  if (g > 0 && (cv.grid[g] + block_size - 1) / block_size > (filled + block_size - 1) / block_size) --g;
  return g;
}

bool auto_clearly_better(const std::vector<AutoLayerCurves> &layers, const std::vector<size_t> &a, const std::vector<size_t> &b) {
  double la = 0, lb = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    la += layers[l].best_loss(a[l]);
    lb += layers[l].best_loss(b[l]);
  }
  return la < lb - std::max(0.1 * lb, static_cast<double>(kMinLossGain) * static_cast<double>(layers.size()));
}

std::vector<int32_t> auto_select_layer(const CompressionConfig &c, const AutoLayerInput &in, const AutoLayerCurves &cv,
                                       size_t g, AutoLayerChoice *choice) {
  Evidence ev = Evidence::window_attention;
  const float loss = cv.best_loss(g, &ev);
  const int32_t budget = cv.grid[g];
  choice->evidence = ev;
  choice->alpha = ev == Evidence::infokv ? c.alpha : 1.0f;
  choice->budget = std::min(budget, cv.n);
  choice->loss = std::isfinite(loss) ? loss : 0.0f;
  return select_with_scores(in.score, budget, cv.window, cv.scores[static_cast<size_t>(ev)], ev == Evidence::recency);
}

}  // namespace infokv
