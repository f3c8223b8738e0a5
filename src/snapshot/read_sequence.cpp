// A sequence chunk: the session's state of the sequence (tokens, logits, pending entropy) and its compressor's
// (counters, protected spans, auto's report), checked and staged (snapshot/read_internal.hpp).
#include <cmath>

#include "snapshot/read_internal.hpp"

namespace infokv {
namespace snapshot {
namespace detail {

namespace {

// The auto policy's report of a sequence of logical length `len`, checked before anything is staged: a layer per
// model layer (or none), known evidence, budgets within the length, finite non-negative losses, alpha in [0, 1].
AutoReport read_auto_report(const fb::Sequence *s, int32_t n_layer, int64_t len, const std::string &where) {
  AutoReport r;
  const size_t n = vsize(s->auto_layers());
  if (n == 0) {
    if (s->auto_loss() != 0.0 || s->auto_tokens() != 0 || s->auto_uniform_tokens() != 0 || s->auto_max_loss() != 0.0)
      bad(where + ": auto report values without its layers");
    return r;
  }
  if (n != static_cast<size_t>(n_layer))
    bad(where + ": auto report has " + std::to_string(n) + " layers, the cache " + std::to_string(n_layer));
  auto finite_loss = [](double v) { return std::isfinite(v) && v >= 0.0; };
  for (size_t l = 0; l < n; ++l) {
    const fb::AutoLayer *a = s->auto_layers()->Get(static_cast<flatbuffers::uoffset_t>(l));
    const std::string lw = where + ": auto report layer " + std::to_string(l);
    if (a->evidence() < 0 || a->evidence() >= kEvidenceKinds) bad(lw + ": unknown evidence " + std::to_string(a->evidence()));
    if (!in_range(a->budget(), 0, len)) bad(lw + ": budget " + std::to_string(a->budget()) + " outside the length");
    if (!(a->alpha() >= 0.0f && a->alpha() <= 1.0f)) bad(lw + ": alpha outside [0, 1]");
    if (!finite_loss(a->loss())) bad(lw + ": loss is not finite and >= 0");
    AutoLayerChoice ch;
    ch.evidence = static_cast<Evidence>(a->evidence());
    ch.budget = a->budget();
    ch.alpha = a->alpha();
    ch.loss = a->loss();
    r.layers.push_back(ch);
  }
  const int64_t most = static_cast<int64_t>(n_layer) * len;
  if (!finite_loss(s->auto_loss()) || !finite_loss(s->auto_max_loss()) || !in_range(s->auto_tokens(), 0, most) ||
      !in_range(s->auto_uniform_tokens(), 0, most))
    bad(where + ": auto report totals out of range");
  r.loss = s->auto_loss();
  r.tokens = s->auto_tokens();
  r.uniform_tokens = s->auto_uniform_tokens();
  r.max_loss = s->auto_max_loss();
  return r;
}

}  // namespace

SequenceSummary read_sequence(const fb::Sequence *s, int32_t si, const Summary &sum, Staged *staged, const Capacity *cap,
                              int64_t &need, StagedSeq **sq_out) {
  const std::string where = "sequence " + std::to_string(si);
  if (s->index() != si) bad(where + ": out of order");
  const int64_t len = s->length();
  if (!in_range(len, 0, (int64_t{1} << 31) - 2)) bad(where + ": invalid length");
  if (static_cast<int64_t>(vsize(s->tokens())) != len) bad(where + ": token count differs from the length");
  check_hash(s->tokens(), s->tokens_xxh3(), where + " tokens");
  if (s->tokens() != nullptr)
    for (int32_t t : *s->tokens())
      if (t < 0 || t >= sum.n_vocab) bad(where + ": token id outside the vocabulary");
  if (s->has_logits() ? vsize(s->logits()) != static_cast<size_t>(sum.n_vocab) : vsize(s->logits()) != 0)
    bad(where + ": logits size differs from the vocabulary");
  check_hash(s->logits(), s->logits_xxh3(), where + " logits");
  if (!all_finite(s->logits())) bad(where + ": logits are not all finite");
  // Counters the session increments or compares: tokens since the last compression cannot exceed the length, and
  // a compression count near the top of int64 would overflow on the next compression.
  if (!in_range(s->since_compress(), 0, len) || !in_range(s->n_compressions(), 0, kMaxCounter) ||
      !(std::isfinite(s->pending_entropy()) && s->pending_entropy() >= 0.0f))
    bad(where + ": invalid counters (since_compress " + std::to_string(s->since_compress()) + ", compressions " +
        std::to_string(s->n_compressions()) + ")");
  if (vsize(s->kept_per_layer()) != static_cast<size_t>(sum.n_layer)) bad(where + ": kept counts do not match the layers");
  const size_t n_wpos = vsize(s->window_pos());
  if (n_wpos > 65536) bad(where + ": observation window too large");
  for (size_t i = 0; i < n_wpos; ++i) {
    const int32_t p = s->window_pos()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (p < 0 || p >= len || (i > 0 && p <= s->window_pos()->Get(static_cast<flatbuffers::uoffset_t>(i - 1))))
      bad(where + ": window positions not ascending within the length");
  }
  SequenceSummary ss;
  ss.auto_report = read_auto_report(s, sum.n_layer, len, where);
  ss.saved_id = s->saved_id();
  ss.length = len;
  ss.n_compressions = s->n_compressions();
  ss.has_logits = s->has_logits();
  ss.window_rows = static_cast<int64_t>(n_wpos);
  ss.layer_chunks = s->layer_chunks();
  ss.n_spans = static_cast<int64_t>(vsize(s->spans()));
  for (int32_t k : *s->kept_per_layer()) {
    if (k < 0 || k > len) bad(where + ": kept count beyond the length");
    ss.kept_per_layer.push_back(k);
    if (cap != nullptr) need += blocks_for(k, cap->block_size);
  }
  if (cap != nullptr && need > cap->free_blocks) kv_full(need, cap->free_blocks);
  StagedSeq *sq = nullptr;
  if (staged != nullptr) {
    staged->seqs.emplace_back();
    sq = &staged->seqs.back();
    sq->length = len;
    sq->st.tokens.assign(s->tokens()->begin(), s->tokens()->end());
    sq->st.has_logits = s->has_logits();
    if (s->has_logits()) sq->st.logits.assign(s->logits()->begin(), s->logits()->end());
    sq->st.pending_entropy = s->pending_entropy();
    sq->cst.since_compress = s->since_compress();
    sq->st.prefilled = s->prefilled();
    sq->cst.n_compressions = s->n_compressions();
    sq->cst.auto_report = ss.auto_report;
    if (s->window_pos() != nullptr) sq->window_pos.assign(s->window_pos()->begin(), s->window_pos()->end());
    sq->layers.resize(static_cast<size_t>(sum.n_layer));
  }
  if (vsize(s->spans()) > static_cast<size_t>(kMaxProtectedSpans))
    bad(where + ": " + std::to_string(vsize(s->spans())) + " protected spans (at most " + std::to_string(kMaxProtectedSpans) + ")");
  if (s->spans() != nullptr)
    for (const fb::Span *sp : *s->spans()) {
      if (sp->begin() < 0 || sp->end() < sp->begin()) bad(where + ": invalid protected span");
      if (sq != nullptr) add_span(sq->cst.spans, ProtectedSpan{sp->begin(), sp->end(), sp->fair()});
    }
  if (s->layer_chunks() < sum.n_layer) bad(where + ": too few layer chunks");
  *sq_out = sq;
  return ss;
}

}  // namespace detail
}  // namespace snapshot
}  // namespace infokv
