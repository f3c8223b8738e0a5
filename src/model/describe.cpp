#include "model/describe.hpp"

#include "util/json_escape.hpp"

#include <cstdio>
#include <map>
#include <sstream>

#include "kernels/ggml_types.hpp"

namespace infokv {

std::string describe_json(const Model &m) {
  const HParams &hp = m.hparams();
  std::ostringstream js;
  js << "{\"architecture\":\"" << json_escape(hp.arch) << "\",\"name\":\""
     << json_escape(m.name()) << "\",\"format\":\"" << m.format() << "\",\"gguf_version\":" << (m.has_gguf() ? m.gguf().version() : 0)
     << ",\"n_vocab\":" << hp.n_vocab << ",\"n_embd\":" << hp.n_embd << ",\"n_layer\":" << hp.n_layer
     << ",\"n_head\":" << hp.n_head << ",\"n_head_kv\":" << hp.n_head_kv << ",\"head_dim\":" << hp.head_dim
     << ",\"n_ff\":" << hp.n_ff << ",\"n_ctx_train\":" << hp.n_ctx_train << ",\"sliding_window\":" << hp.sliding_window
     << ",\"rope_theta\":" << hp.rope_theta << ",\"rope_scaling\":{\"type\":\"" << rope_scaling_name(hp.rope.type)
     << "\",\"factor\":" << hp.rope.factor << ",\"original_context\":" << hp.rope.original_ctx
     << ",\"n_freq_factors\":" << hp.rope.freq_factors.size() << "},\"attention_bias\":" << (m.layer(0).bq.empty() ? "false" : "true")
     << ",\"rms_eps\":" << hp.rms_eps << ",\"n_params\":" << m.n_params() << ",\"weight_bytes\":" << m.weight_bytes()
     << ",\"file_bytes\":" << m.file_bytes() << ",\"tied_output\":" << (m.tied_output() ? "true" : "false")
     << ",\"tokenizer\":{\"model\":\"" << json_escape(m.tokenizer().model_name())
     << "\",\"n_vocab\":" << m.tokenizer().n_vocab() << ",\"bos\":" << m.tokenizer().bos()
     << ",\"eos\":" << m.tokenizer().eos() << "},\"tensor_types\":{";
  const std::map<std::string, int> &types = m.tensor_types();
  bool first = true;
  for (const auto &kv : types) {
    js << (first ? "" : ",") << "\"" << kv.first << "\":" << kv.second;
    first = false;
  }
  js << "}}";
  return js.str();
}

}  // namespace infokv
