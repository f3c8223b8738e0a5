#include "session/generate.hpp"

#include <chrono>

#include "util/error.hpp"

namespace infokv {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(Session &session, int32_t seq, const std::vector<int32_t> &prompt, int32_t max_tokens,
                        Sampler &sampler, const TokenCallback &on_token) {
  if (max_tokens < 0) fail(Status::invalid_argument, "max_tokens must not be negative");
  GenerateResult res;
  const Tokenizer &tok = session.model().tokenizer();
  auto t0 = std::chrono::steady_clock::now();
  if (!prompt.empty()) {
    session.prefill(seq, prompt);  // chunked, compressing between chunks, when a policy is on
    for (int32_t t : prompt) sampler.accept(t);
    res.prefill_tokens = static_cast<int64_t>(prompt.size());
  }
  res.prefill_seconds = seconds_since(t0);
  StreamingDetokenizer detok(tok);
  auto t1 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < max_tokens; ++i) {
    const std::vector<float> &lg = session.logits(seq);
    const Rng before = sampler.rng();
    const int32_t next = sampler.sample(lg.data(), static_cast<int32_t>(lg.size()));
    if (tok.is_eog(next)) {
      res.stopped_by_eos = true;
      break;
    }
    // Every generated token is decoded before it is reported, the last one too: the sequence then holds everything
    // this run produced and its logits predict what follows, so a later generate (or a snapshot) continues exactly
    // where this one stopped. A token whose decode fails is not reported and its draw is undone.
    try {
      session.decode({{seq, next, false}});
    } catch (const Error &e) {
      sampler.rng() = before;
      res.error = e.status();
      res.error_message = e.what();
      break;
    }
    sampler.accept(next);
    res.tokens.push_back(next);
    std::string piece = detok.push(next);
    res.text += piece;
    if (on_token && !on_token(next, piece)) {
      res.cancelled = true;
      break;
    }
  }
  std::string tail = detok.flush();
  res.text += tail;
  if (!tail.empty() && on_token && !res.cancelled) on_token(-1, tail);
  res.decode_seconds = seconds_since(t1);
  return res;
}

std::vector<GenerateResult> generate_batch(Session &session, const std::vector<int32_t> &seqs, int32_t max_tokens,
                                           std::vector<Sampler> &samplers) {
  if (samplers.size() != seqs.size()) fail(Status::invalid_argument, "one sampler per sequence expected");
  const Tokenizer &tok = session.model().tokenizer();
  std::vector<GenerateResult> res(seqs.size());
  std::vector<StreamingDetokenizer> detok(seqs.size(), StreamingDetokenizer(tok));
  std::vector<char> live(seqs.size(), 1);
  auto t1 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < max_tokens; ++i) {
    std::vector<BatchToken> batch;
    std::vector<size_t> who;
    std::vector<Rng> before;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (!live[s]) continue;
      const std::vector<float> &lg = session.logits(seqs[s]);
      before.push_back(samplers[s].rng());
      const int32_t next = samplers[s].sample(lg.data(), static_cast<int32_t>(lg.size()));
      if (tok.is_eog(next)) {
        before.pop_back();
        res[s].stopped_by_eos = true;
        live[s] = 0;
        continue;
      }
      batch.push_back({seqs[s], next, false});
      who.push_back(s);
    }
    if (batch.empty()) break;
    try {
      session.decode(batch);
    } catch (const Error &e) {
      // The step changed nothing: undo its draws and report the tokens decoded before it.
      for (size_t b = 0; b < who.size(); ++b) {
        samplers[who[b]].rng() = before[b];
        res[who[b]].error = e.status();
        res[who[b]].error_message = e.what();
      }
      break;
    }
    for (size_t b = 0; b < who.size(); ++b) {
      const size_t s = who[b];
      samplers[s].accept(batch[b].token);
      res[s].tokens.push_back(batch[b].token);
      res[s].text += detok[s].push(batch[b].token);
    }
  }
  const double dt = seconds_since(t1);
  for (size_t s = 0; s < seqs.size(); ++s) {
    res[s].text += detok[s].flush();
    res[s].decode_seconds = dt;
  }
  return res;
}

}  // namespace infokv
