#include "compress/scores.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "compress/policy_table.hpp"
#include "util/error.hpp"

namespace infokv {

int32_t window_size(const CompressionConfig &c, int32_t budget) {
  int32_t w = c.window >= 0 ? c.window : std::min(defaults::max_window, budget / 4);
  return std::max(0, std::min(w, budget - 1));
}

std::vector<int32_t> layer_budgets(const CompressionConfig &c, const std::vector<int32_t> &counts, int32_t budget) {
  const auto L = static_cast<int32_t>(counts.size());
  std::vector<int32_t> out(counts.size(), budget);
  const bool pyramid = policy_info(c.policy).pyramid || c.shape == BudgetShape::pyramid;
  if (!pyramid || L < 2) return out;
  // kvpress PyramidKV: candidate budgets fall linearly from max (bottom) to min (top) with min = C / beta.
  const int32_t n = *std::max_element(counts.begin(), counts.end());
  const int32_t w = window_size(c, budget);
  const double C = static_cast<double>(budget - w);
  double mn = C / c.beta;
  double mx = 2.0 * C - mn;
  if (mx > n - w) {
    mx = n - w;
    mn = 2.0 * C - mx;
  }
  if (mn < w || mn < 0) return out;  // the top layer would fall below the window: uniform, as kvpress does
  const double step = (mx - mn) / (L - 1);
  for (int32_t l = 0; l < L; ++l) out[static_cast<size_t>(l)] = w + static_cast<int32_t>(std::lround(mx - l * step));
  return out;
}

std::vector<int32_t> global_layer_budgets(const std::vector<std::vector<float>> &score, const std::vector<int32_t> &counts,
                                          const std::vector<int32_t> &budgets, int32_t bs) {
  const size_t L = counts.size();
  if (score.size() != L || budgets.size() != L || bs <= 0) fail(Status::internal, "global_layer_budgets: one entry per layer");
  const auto blocks_of = [bs](int64_t t) { return (t + bs - 1) / bs; };
  int64_t total_tokens = 0, total_blocks = 0;
  std::vector<int64_t> cap(L), lo(L);
  for (size_t l = 0; l < L; ++l) {
    if (static_cast<int32_t>(score[l].size()) != counts[l]) fail(Status::internal, "global_layer_budgets: one score per slot");
    const int64_t keep = std::max(0, std::min(budgets[l], counts[l]));
    total_tokens += keep;
    total_blocks += blocks_of(keep);
    cap[l] = blocks_of(counts[l]);
    lo[l] = std::min<int64_t>(1, cap[l]);
  }
  // The winners: the best total_tokens slots anywhere (a partial sort over every slot of every layer).
  struct Entry {
    float s;
    int32_t l, j;
  };
  std::vector<Entry> all;
  all.reserve(static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0})));
  for (size_t l = 0; l < L; ++l)
    for (int32_t j = 0; j < counts[l]; ++j) {
      const float v = score[l][static_cast<size_t>(j)];
      all.push_back({std::isnan(v) ? -std::numeric_limits<float>::infinity() : v, static_cast<int32_t>(l), j});
    }
  const auto better = [](const Entry &a, const Entry &b) {
    if (a.s != b.s) return a.s > b.s;
    if (a.j != b.j) return a.j > b.j;
    return a.l > b.l;
  };
  const auto k = static_cast<size_t>(std::min<int64_t>(total_tokens, static_cast<int64_t>(all.size())));
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), better);
  std::vector<int64_t> won(L, 0);
  for (size_t i = 0; i < k; ++i) ++won[static_cast<size_t>(all[i].l)];
  // Whole blocks: each layer's full blocks of winners (within its floor and cap), then the blocks left over to the
  // layers whose last partial block holds the most winners (largest remainder; the later layer on a tie), then, if
  // the floors took more than there is, blocks back from the layers holding the most.
  std::vector<int64_t> blk(L);
  int64_t given = 0;
  for (size_t l = 0; l < L; ++l) {
    blk[l] = std::max(lo[l], std::min(cap[l], won[l] / bs));
    given += blk[l];
  }
  while (given < total_blocks) {
    size_t best = L;
    int64_t best_rem = 0;
    for (size_t l = 0; l < L; ++l) {
      if (blk[l] >= cap[l]) continue;
      const int64_t rem = won[l] - blk[l] * bs;  // below 0 where the floor gave more than the layer won
      if (best == L || rem >= best_rem) {
        best = l;
        best_rem = rem;
      }
    }
    if (best == L) break;
    ++blk[best];
    ++given;
  }
  while (given > total_blocks) {
    size_t most = L;
    for (size_t l = 0; l < L; ++l)
      if (blk[l] > lo[l] && (most == L || blk[l] > blk[most])) most = l;
    if (most == L) break;
    --blk[most];
    --given;
  }
  std::vector<int32_t> out(L);
  for (size_t l = 0; l < L; ++l) out[l] = static_cast<int32_t>(std::min<int64_t>(counts[l], blk[l] * bs));
  return out;
}

int32_t pool_kernel(const CompressionConfig &c, const LayerScoreInput &in) {
  const int32_t k = in.prefill ? c.pool_kernel_prefill : c.pool_kernel_decode;
  return in.probe_rows > 0 ? std::max(k, defaults::pool_kernel_probe) : k;
}

std::vector<float> pool_and_normalise(const std::vector<float> &a, int32_t kernel) {
  const auto n = static_cast<int64_t>(a.size());
  const int64_t r = kernel / 2;
  std::vector<float> out(a.size(), 0.0f);
  // running window sum; positions outside [0, n) count as zeros in the average
  double s = 0;
  for (int64_t j = 0; j <= std::min(r, n - 1); ++j) s += a[static_cast<size_t>(j)];
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = static_cast<float>(s / kernel);
    const int64_t add = i + r + 1, drop = i - r;
    if (add < n) s += a[static_cast<size_t>(add)];
    if (drop >= 0) s -= a[static_cast<size_t>(drop)];
  }
  double sum = 0;
  for (float v : out) sum += v;
  if (sum > 0)
    for (float &v : out) v = static_cast<float>(v / sum);
  return out;
}

namespace {

// Each value's rank quantile: (1 + how many values are below it) / n.
std::vector<float> rank_quantiles(const std::vector<float> &v) {
  std::vector<float> sorted(v);
  std::sort(sorted.begin(), sorted.end());
  std::vector<float> q(v.size());
  const auto n = static_cast<float>(std::max<size_t>(v.size(), 1));
  for (size_t i = 0; i < v.size(); ++i)
    q[i] = static_cast<float>(std::lower_bound(sorted.begin(), sorted.end(), v[i]) - sorted.begin() + 1) / n;
  return q;
}

}  // namespace

std::vector<float> rank_max(const std::vector<float> &a, const std::vector<float> &b) {
  const std::vector<float> qa = rank_quantiles(a), qb = rank_quantiles(b);
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = std::max(qa[i], qb[i]);
  return out;
}

std::vector<float> window_attention(const LayerScoreInput &in, int32_t n_cand, int32_t w) {
  const LayerSlots &S = *in.slots;
  const int32_t n = S.n();
  const int32_t qd = in.n_heads * in.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(in.head_dim));
  std::vector<float> acc(static_cast<size_t>(n), 0.0f);
  const auto rows = static_cast<int32_t>(in.window_pos->size());
  const int32_t probe = std::min(in.probe_rows, rows);
  const int32_t take = std::min(w, rows - probe) + probe;
  // Each query sees every kept slot at or before its own position.
  std::vector<int32_t> vis(static_cast<size_t>(take));
  for (int32_t r = 0; r < take; ++r) {
    const int32_t p = (*in.window_pos)[static_cast<size_t>(rows - take + r)];
    vis[static_cast<size_t>(r)] = static_cast<int32_t>(std::upper_bound(S.pos.begin(), S.pos.end(), p) - S.pos.begin());
  }
  const float *q = in.window_q->data() + static_cast<int64_t>(rows - take) * qd;
  std::vector<float> probs(static_cast<size_t>(take) * static_cast<size_t>(n), 0.0f);
  if (in.window_probs) {
    in.window_probs(probs.data(), q, vis.data(), take, in.kv, in.n_heads, scale);
  } else {
    PagedKv v = in.kv;
    for (int32_t r = 0; r < take; ++r) {
      if (vis[static_cast<size_t>(r)] == 0) continue;
      v.n_slots = vis[static_cast<size_t>(r)];
      cpu::attention_probs_mean(probs.data() + static_cast<int64_t>(r) * n, q + static_cast<int64_t>(r) * qd, 1, in.n_heads, v,
                                v.n_slots, scale);
    }
  }
  // The mean over the window's rows and, as much in all, over the probe's (Question::both weighs the two alike).
  std::vector<float> part[2] = {std::move(acc), std::vector<float>(static_cast<size_t>(probe > 0 ? n : 0), 0.0f)};
  int32_t used[2] = {0, 0};
  for (int32_t r = 0; r < take; ++r) {
    if (vis[static_cast<size_t>(r)] == 0) continue;
    const int k = r >= take - probe ? 1 : 0;
    for (int32_t j = 0; j < vis[static_cast<size_t>(r)]; ++j) part[k][static_cast<size_t>(j)] += probs[static_cast<size_t>(r) * n + j];
    ++used[k];
  }
  std::vector<float> mean[2];
  for (int k = 0; k < 2; ++k) {
    if (used[k] == 0) continue;
    mean[k].assign(static_cast<size_t>(n_cand), 0.0f);
    for (int32_t j = 0; j < n_cand; ++j) mean[k][static_cast<size_t>(j)] = part[k][static_cast<size_t>(j)] / static_cast<float>(used[k]);
  }
  // The window's rows and the probe's (Question::both): what either ranks high (rank_max).
  if (used[0] > 0 && used[1] > 0) return rank_max(mean[0], mean[1]);
  if (used[0] == 0 && used[1] == 0) return std::vector<float>(static_cast<size_t>(n_cand), 0.0f);
  return std::move(mean[used[1] > 0 ? 1 : 0]);
}

std::vector<float> infokv_mix(const std::vector<float> &attn, const std::vector<float> &rep_change,
                              const std::vector<float> &entropy, float alpha, float tau) {
  const size_t n = attn.size();
  std::vector<double> e(n);
  double mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    e[i] = (static_cast<double>(rep_change[i]) + tau) * entropy[i];
    mx = std::max(mx, e[i]);
  }
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += std::exp(e[i] - mx);
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<float>(alpha * attn[i] + (1.0 - alpha) * std::exp(e[i] - mx) / z);
  return s;
}

std::pair<int32_t, int32_t> span_slots(const std::vector<int32_t> &pos, int32_t n, const ProtectedSpan &span) {
  const auto end = pos.begin() + std::max(0, std::min(n, static_cast<int32_t>(pos.size())));
  const auto lo = std::lower_bound(pos.begin(), end, span.begin);
  const auto hi = std::lower_bound(lo, end, span.end);
  return {static_cast<int32_t>(lo - pos.begin()), static_cast<int32_t>(hi - pos.begin())};
}

int32_t whole_block_budget(int32_t b, int32_t bs) {
  const int32_t r = b % bs;
  return b > bs && r > 0 && r <= bs / 4 ? b - r : b;
}

std::vector<int32_t> top_k_later_ties(const std::vector<float> &scores, const std::vector<int32_t> &allowed, int32_t k) {
  std::vector<int32_t> idx = allowed;
  k = std::max(0, std::min<int32_t>(k, static_cast<int32_t>(idx.size())));
  auto better = [&](int32_t a, int32_t b) {
    const float sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a > b;
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

int32_t policy_window(const CompressionConfig &c, int32_t budget, int32_t n) {
  const WindowRule r = policy_info(c.policy).window;
  const int32_t w = r == WindowRule::last_token ? 1 : r == WindowRule::none ? 0 : window_size(c, budget);
  return std::min(w, n);
}

int32_t kept_window(const CompressionConfig &c, int32_t budget) {
  return policy_info(c.policy).window == WindowRule::last_token ? 1 : window_size(c, budget);
}

std::vector<float> policy_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w) {
  const PolicyScorer scorer = policy_info(c.policy).scorer;
  if (scorer == nullptr) fail(Status::internal, std::string("policy_scores: ") + policy_name(c.policy) + " has no score of its own");
  return scorer(c, in, n_cand, w);
}

std::vector<int32_t> select_keep(const CompressionConfig &c, const LayerScoreInput &in, int32_t budget,
                                 double *evicted_share) {
  const int32_t n = in.slots->n();
  if (evicted_share != nullptr) *evicted_share = 0.0;
  if (n <= budget || !c.enabled()) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  const int32_t w = policy_window(c, budget, n);
  const std::vector<float> score = policy_scores(c, in, n - w, w);
  return select_with_scores(in, budget, w, score, policy_info(c.policy).rank_only, evicted_share);
}

std::vector<int32_t> select_with_scores(const LayerScoreInput &in, int32_t budget, int32_t w, const std::vector<float> &score,
                                        bool count_tokens, double *evicted_share) {
  const LayerSlots &S = *in.slots;
  const int32_t n = S.n();
  if (evicted_share != nullptr) *evicted_share = 0.0;
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  if (n <= budget) return all;
  w = std::max(0, std::min(w, n));
  const int32_t n_cand = n - w;
  if (static_cast<int32_t>(score.size()) != n_cand) fail(Status::internal, "select_with_scores: one score per candidate");
  std::vector<char> keep(static_cast<size_t>(n), 0);
  for (int32_t j = n_cand; j < n; ++j) keep[static_cast<size_t>(j)] = 1;
  // Protected (never evicted) spans; fair spans are grouped for proportional quotas.
  std::vector<int32_t> group(static_cast<size_t>(n), -1);
  int32_t n_groups = 0;
  if (in.spans != nullptr) {
    // Positions ascend, so each span covers one run of candidates.
    for (const ProtectedSpan &sp : *in.spans) {
      const int32_t g = sp.fair ? n_groups++ : -2;
      const std::pair<int32_t, int32_t> r = span_slots(S.pos, n_cand, sp);
      for (auto j = static_cast<size_t>(r.first); j < static_cast<size_t>(r.second); ++j) {
        if (g == -2) keep[j] = 1;
        else if (!keep[j]) group[j] = g;
      }
    }
  }
  int32_t fixed = 0;
  for (char k : keep) fixed += k;
  int32_t slots_left = std::max(0, budget - fixed);

  // Candidates by group: -1 (ordinary) and each fair span; each gets the same fraction of its tokens.
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(n_groups + 1));
  int32_t n_free = 0;
  for (int32_t j = 0; j < n_cand; ++j) {
    if (keep[static_cast<size_t>(j)]) continue;
    members[static_cast<size_t>(group[static_cast<size_t>(j)] + 1)].push_back(j);
    ++n_free;
  }
  if (n_groups == 0) {
    for (int32_t j : top_k_later_ties(score, members[0], slots_left)) keep[static_cast<size_t>(j)] = 1;
  } else {
    const double frac = n_free > 0 ? std::min(1.0, static_cast<double>(slots_left) / n_free) : 0.0;
    int32_t given = 0;
    std::vector<int32_t> quota(members.size());
    for (size_t g = 0; g < members.size(); ++g) {
      quota[g] = static_cast<int32_t>(std::floor(frac * static_cast<double>(members[g].size())));
      given += quota[g];
    }
    // Hand out the rounding remainder one token per group, the last groups first (later spans are more recent).
    for (size_t g = members.size(); given < slots_left && g-- > 0;) {
      if (quota[g] < static_cast<int32_t>(members[g].size())) {
        ++quota[g];
        ++given;
      }
    }
    for (size_t g = 0; g < members.size(); ++g)
      for (int32_t j : top_k_later_ties(score, members[g], quota[g])) keep[static_cast<size_t>(j)] = 1;
  }
  std::vector<int32_t> out;
  for (int32_t j = 0; j < n; ++j)
    if (keep[static_cast<size_t>(j)]) out.push_back(j);
  if (evicted_share != nullptr) *evicted_share = dropped_share(score, out, count_tokens);
  return out;
}

double dropped_share(const std::vector<float> &score, const std::vector<int32_t> &keep, bool count_tokens) {
  double dropped = 0, total = 0;
  size_t k = 0;
  for (size_t j = 0; j < score.size(); ++j) {
    const float v = score[j];
    // Streaming's scores are positions (and +inf for the sinks): count tokens instead.
    const double m = count_tokens || !std::isfinite(v) ? 1.0 : std::max(0.0, static_cast<double>(v));
    total += m;
    while (k < keep.size() && static_cast<size_t>(keep[k]) < j) ++k;
    if (k == keep.size() || static_cast<size_t>(keep[k]) != j) dropped += m;
  }
  return total > 0 ? dropped / total : 0.0;
}

}  // namespace infokv
