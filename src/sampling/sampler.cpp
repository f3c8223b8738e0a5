#include "sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.hpp"

namespace infokv {

namespace {

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t splitmix64(uint64_t &x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Higher logit first; equal logits by lower id, so the order (and with it every draw) is fully determined.
bool better(const std::pair<float, int32_t> &a, const std::pair<float, int32_t> &b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

// ---- Rng ----

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t &w : s_) w = splitmix64(x);  // splitmix64 never yields four zero words, so the state is valid
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void Rng::set_state(const uint64_t s[4]) {
  // The all-zero state is a fixed point of xoshiro (it would return 0 forever): only a corrupt snapshot has it.
  if ((s[0] | s[1] | s[2] | s[3]) == 0) fail(Status::invalid_argument, "RNG state must not be all zero");
  for (int k = 0; k < 4; ++k) s_[k] = s[k];
}

// ---- Sampler ----

// Negative temperature is accepted and means greedy, as the header documents for <= 0; every other out-of-domain
// value is an error rather than silently clamped, because it is almost always a caller's bug.
Sampler::Sampler(const SamplerParams &p) : params_(p), rng_(p.seed) {
  auto bad = [](const std::string &what) { fail(Status::invalid_argument, "sampler: " + what); };
  if (std::isnan(p.temperature) || std::isinf(p.temperature)) bad("temperature must be a finite number");
  if (std::isnan(p.top_p) || p.top_p < 0) bad("top_p must be >= 0");
  if (std::isnan(p.min_p) || p.min_p < 0 || p.min_p > 1) bad("min_p must be in [0, 1]");
  if (!(p.repeat_penalty > 0) || std::isinf(p.repeat_penalty)) bad("repeat_penalty must be a positive finite number");
  if (p.repeat_last_n < 0) bad("repeat_last_n must be >= 0");
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  while (history_.size() > static_cast<size_t>(params_.repeat_last_n)) history_.pop_front();
}

void Sampler::reset() {
  history_.clear();
  rng_.reseed(params_.seed);
}

void Sampler::set_history(const std::vector<int32_t> &h) {
  history_.clear();
  for (int32_t t : h) accept(t);
}

int32_t Sampler::sample(const float *logits, int32_t n) {
  if (logits == nullptr || n <= 0) fail(Status::invalid_argument, "sampler: no logits to sample from");
  const auto un = static_cast<size_t>(n);
  work_.resize(un);
  for (size_t k = 0; k < un; ++k) {
    // A NaN logit (a numerical fault upstream) must not poison the distribution: treat it as impossible.
    float l = std::isnan(logits[k]) ? -std::numeric_limits<float>::infinity() : logits[k];
    work_[k] = {l, static_cast<int32_t>(k)};
  }

  // Repetition penalty (llama.cpp's rule): each distinct recent token once, however often it occurred.
  if (params_.repeat_penalty != 1.0f && !history_.empty()) {
    std::vector<int32_t> recent(history_.begin(), history_.end());
    std::sort(recent.begin(), recent.end());
    recent.erase(std::unique(recent.begin(), recent.end()), recent.end());
    for (int32_t t : recent) {
      if (t < 0 || t >= n) continue;
      float &l = work_[static_cast<size_t>(t)].first;
      l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
  }

  if (params_.temperature <= 0) {
    size_t best = 0;
    for (size_t k = 1; k < un; ++k)
      if (work_[k].first > work_[best].first) best = k;  // strict: ties keep the lowest id
    return work_[best].second;
  }

  // Top-k: partial sort leaves the k best in order, in O(n log k) rather than a full sort of the vocabulary.
  size_t m = un;
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < un) {
    m = static_cast<size_t>(params_.top_k);
    std::partial_sort(work_.begin(), work_.begin() + static_cast<std::ptrdiff_t>(m), work_.end(), better);
    sorted = true;
  }

  // Top-p needs the candidates in order; without top-k that costs a full sort, as in llama.cpp.
  if (params_.top_p < 1.0f && !sorted) std::sort(work_.begin(), work_.begin() + static_cast<std::ptrdiff_t>(m), better);

  // Softmax at temperature, in double so that long tails do not round away.
  float max_l = -std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < m; ++k) max_l = std::max(max_l, work_[k].first);
  if (max_l == -std::numeric_limits<float>::infinity()) {
    // Nothing is possible (all -inf or NaN): fall back to the lowest id among the candidates.
    int32_t lowest = work_[0].second;
    for (size_t k = 1; k < m; ++k) lowest = std::min(lowest, work_[k].second);
    return lowest;
  }
  std::vector<double> &prob = probs_;
  prob.resize(m);
  double sum = 0;
  for (size_t k = 0; k < m; ++k) {
    double l = work_[k].first;
    // +inf logits share all the mass; the general formula would give inf - inf = NaN.
    double p = std::isinf(max_l) ? (l == max_l ? 1.0 : 0.0) : std::exp((l - max_l) / params_.temperature);
    prob[k] = p;
    sum += p;
  }
  for (size_t k = 0; k < m; ++k) prob[k] /= sum;

  // Top-p: the smallest highest-probability prefix whose mass reaches top_p (at least one token).
  if (params_.top_p < 1.0f && m > 1) {
    double cum = 0;
    size_t keep = m;
    for (size_t k = 0; k < m; ++k) {
      cum += prob[k];
      if (cum >= params_.top_p) {
        keep = k + 1;
        break;
      }
    }
    m = keep;
  }

  // Min-p: drop tokens below min_p times the most likely one (which always stays).
  if (params_.min_p > 0) {
    double pmax = 0;
    for (size_t k = 0; k < m; ++k) pmax = std::max(pmax, prob[k]);
    const double cut = params_.min_p * pmax;
    size_t w = 0;
    for (size_t k = 0; k < m; ++k) {
      if (prob[k] >= cut) {
        work_[w] = work_[k];
        prob[w] = prob[k];
        ++w;
      }
    }
    m = w;
  }

  // Renormalise implicitly: draw against the kept mass.
  double kept = 0;
  for (size_t k = 0; k < m; ++k) kept += prob[k];
  const double r = rng_.uniform() * kept;
  double cum = 0;
  for (size_t k = 0; k < m; ++k) {
    cum += prob[k];
    if (r < cum) return work_[k].second;
  }
  // Rounding can leave r just above the last partial sum: the last token with any mass takes it.
  for (size_t k = m; k-- > 0;)
    if (prob[k] > 0) return work_[k].second;
  return work_[0].second;
}

}  // namespace infokv
