// Token sampling: repetition penalty, top-k, top-p, min-p and temperature, with a seeded, portable RNG.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "util/defaults.hpp"

namespace infokv {

struct SamplerParams {
  float temperature = defaults::temperature;        // <= 0 means greedy (argmax; ties go to the lowest id)
  int32_t top_k = defaults::top_k;                  // <= 0 disables
  float top_p = defaults::top_p;                    // >= 1 disables
  float min_p = defaults::min_p;                    // <= 0 disables
  float repeat_penalty = defaults::repeat_penalty;  // 1 disables; applied to the last repeat_last_n accepted tokens
  int32_t repeat_last_n = defaults::repeat_last_n;
  uint64_t seed = defaults::seed;
};

// xoshiro256** — small, fast, and the same sequence on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits
  const uint64_t *state() const { return s_; }
  void set_state(const uint64_t s[4]);

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  // Throws Error(invalid_argument) for NaN or infinite values, top_p < 0, min_p outside [0, 1], repeat_penalty <= 0
  // or repeat_last_n < 0. A negative temperature is not an error: like 0 it means greedy.
  explicit Sampler(const SamplerParams &p);
  const SamplerParams &params() const { return params_; }

  // Picks a token from `n` logits (not modified). Pipeline: repetition penalty over recent tokens, then greedy if
  // temperature <= 0; otherwise top-k, softmax at temperature, top-p, min-p, renormalise, draw. A draw consumes
  // exactly one rng().uniform(); greedy consumes none. NaN logits count as -inf. Throws Error(invalid_argument)
  // when n <= 0 or logits is null.
  int32_t sample(const float *logits, int32_t n);
  // Records a token for the repetition penalty (sample() does not call it: the caller accepts what it keeps).
  void accept(int32_t token);
  void reset();  // clears history and reseeds with params().seed

  Rng &rng() { return rng_; }
  const std::deque<int32_t> &history() const { return history_; }
  void set_history(const std::vector<int32_t> &h);

 private:
  SamplerParams params_;
  Rng rng_;
  std::deque<int32_t> history_;
  std::vector<std::pair<float, int32_t>> work_;  // (logit, id) candidates, reused across calls
  std::vector<double> probs_;                     // their probabilities, parallel to work_
};

}  // namespace infokv
