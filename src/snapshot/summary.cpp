// A snapshot's description, as `infokv snapshot inspect` prints it: JSON and text.
#include <cstdio>
#include <sstream>

#include "compress/auto_report.hpp"
#include "snapshot/snapshot.hpp"
#include "util/json_escape.hpp"

namespace infokv {
namespace snapshot {

namespace {
std::string jstr(const std::string &s) { return "\"" + json_escape(s) + "\""; }
std::string hex(uint64_t v) { char b[24]; std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v)); return b; }
std::string ints(const std::vector<int32_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
std::string num(double v) { std::ostringstream s; s.precision(7); s << v; return s.str(); }
}  // namespace

std::string summary_json(const Summary &s) {
  std::ostringstream o;
  const CompressionConfig &c = s.compression;
  o << "{\"format_version\":" << s.format_version << ",\"min_reader_version\":" << s.min_reader_version
    << ",\"producer\":" << jstr(s.producer) << ",\"weights_fingerprint\":\"" << hex(s.weights_fingerprint)
    << "\",\"tokenizer_fingerprint\":\"" << hex(s.tokenizer_fingerprint) << "\",\"kv_dtype\":\"" << kv_dtype_name(s.kv_dtype)
    << "\",\"block_size\":" << s.block_size << ",\"n_layer\":" << s.n_layer << ",\"n_kv_heads\":" << s.n_kv_heads
    << ",\"head_dim\":" << s.head_dim << ",\"n_heads\":" << s.n_heads << ",\"n_vocab\":" << s.n_vocab
    << ",\"created_unix_ms\":" << s.created_unix_ms << ",\"compression\":{\"policy\":\"" << policy_name(c.policy)
    << "\",\"budget_fraction\":" << num(c.budget_fraction) << ",\"budget_tokens\":" << c.budget_tokens
    << ",\"window\":" << c.window << ",\"interval\":" << c.interval << ",\"alpha\":" << num(c.alpha)
    << ",\"tau\":" << num(c.tau) << ",\"entropy_top_k\":" << c.entropy_top_k << ",\"pool_kernel_prefill\":"
    << c.pool_kernel_prefill << ",\"pool_kernel_decode\":" << c.pool_kernel_decode << ",\"shape\":\""
    << (c.shape == BudgetShape::pyramid ? "pyramid" : "uniform") << "\",\"beta\":" << num(c.beta) << ",\"sink\":" << c.sink
    << ",\"compress_after_prefill\":" << (c.compress_after_prefill ? "true" : "false") << ",\"max_loss\":" << num(c.max_loss)
    << ",\"question\":\"" << question_name(c.question) << "\"}";
  o << ",\"sampler\":";
  if (s.has_sampler)
    o << "{\"temperature\":" << num(s.sampler.temperature) << ",\"top_k\":" << s.sampler.top_k << ",\"top_p\":"
      << num(s.sampler.top_p) << ",\"min_p\":" << num(s.sampler.min_p) << ",\"repeat_penalty\":" << num(s.sampler.repeat_penalty)
      << ",\"repeat_last_n\":" << s.sampler.repeat_last_n << ",\"seed\":" << s.sampler.seed << "}";
  else
    o << "null";
  o << ",\"file_bytes\":" << s.file_bytes << ",\"chunks\":" << s.n_chunks << ",\"kept_kv_bytes\":" << s.kept_kv_bytes
    << ",\"full_kv_bytes\":" << s.full_kv_bytes << ",\"uncompressed_estimate_bytes\":" << s.uncompressed_estimate_bytes
    << ",\"profile\":";
  if (s.profile_compressions >= 0)
    o << "{\"tag\":" << jstr(s.profile_tag) << ",\"compressions\":" << s.profile_compressions << "}";
  else
    o << "null";
  o
    << ",\"sequences\":[";
  for (size_t i = 0; i < s.sequences.size(); ++i) {
    const SequenceSummary &q = s.sequences[i];
    o << (i ? "," : "") << "{\"saved_id\":" << q.saved_id << ",\"length\":" << q.length << ",\"compressions\":"
      << q.n_compressions << ",\"has_logits\":" << (q.has_logits ? "true" : "false") << ",\"protected_spans\":" << q.n_spans
      << ",\"window_rows\":" << q.window_rows << ",\"layer_chunks\":" << q.layer_chunks
      << ",\"kept_per_layer\":" << ints(q.kept_per_layer) << ",\"auto\":" << auto_report_json(q.auto_report) << "}";
  }
  o << "]}";
  return o.str();
}

std::string summary_text(const Summary &s) {
  std::ostringstream o;
  o << "infokv snapshot, format " << s.format_version << " (readers >= " << s.min_reader_version << "), by "
    << s.producer << "\n";
  o << "model:        weights " << hex(s.weights_fingerprint) << ", tokenizer " << hex(s.tokenizer_fingerprint) << "\n";
  o << "layout:       " << s.n_layer << " layers, " << s.n_heads << " heads, " << s.n_kv_heads << " KV heads of "
    << s.head_dim << ", vocab " << s.n_vocab << "\n";
  o << "KV cache:     " << kv_dtype_name(s.kv_dtype) << ", block size " << s.block_size << "\n";
  const CompressionConfig &c = s.compression;
  o << "policy:       " << policy_name(c.policy);
  if (c.enabled()) {
    const std::string target = c.quality_target() ? "max loss " + num(c.max_loss)
                               : c.budget_tokens > 0 ? "budget " + std::to_string(c.budget_tokens) + " tokens"
                                                     : "budget " + num(c.budget_fraction);
    o << " (" << target << ", window " << c.window << ", interval " << c.interval << ", alpha " << num(c.alpha) << ")";
  }
  o << "\n";
  o << "sampler:      " << (s.has_sampler ? "seed " + std::to_string(s.sampler.seed) + ", temperature " + num(s.sampler.temperature) : "none") << "\n";
  o << "size:         " << s.file_bytes << " bytes in " << s.n_chunks << " chunks; KV kept " << s.kept_kv_bytes
    << " of " << s.full_kv_bytes << " bytes; uncompressed snapshot about " << s.uncompressed_estimate_bytes << " bytes\n";
  if (s.profile_compressions >= 0)
    o << "profile:      " << (s.profile_tag.empty() ? std::string("(no tag)") : "'" + s.profile_tag + "'") << ", "
      << s.profile_compressions << " compressions seen\n";
  for (size_t i = 0; i < s.sequences.size(); ++i) {
    const SequenceSummary &q = s.sequences[i];
    o << "sequence " << i << ": length " << q.length << ", compressions " << q.n_compressions << ", kept per layer "
      << ints(q.kept_per_layer) << "\n";
    if (!q.auto_report.empty()) {
      o << "  auto: " << auto_report_summary(q.auto_report) << "\n";
      for (const std::string &line : auto_report_layer_lines(q.auto_report)) o << "    " << line << "\n";
    }
  }
  return o.str();
}

}  // namespace snapshot
}  // namespace infokv
