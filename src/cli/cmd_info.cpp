#include <cstdio>

#include "backend/device.hpp"
#include "cli/args.hpp"
#include "kernels/ggml_types.hpp"
#include "model/describe.hpp"
#include "model/model.hpp"
#include <map>

namespace infokv {
namespace cli {

int cmd_info(int argc, char **argv) {
  Args a(argc, argv, 2, {"model"}, {"json"});
  const std::string path = resolve_model_path(a.str("model", default_model_path()));
  auto m = Model::load(path);
  if (a.flag("json")) {
    // The model's description plus what this build can run on ("devices").
    std::string j = describe_json(*m);
    const DeviceReport dr = device_report();
    const size_t close = j.rfind('}');
    if (close != std::string::npos) j.insert(close, std::string(", \"devices\": ") + device_report_json(dr));
    std::printf("%s\n", j.c_str());
    return 0;
  }
  const HParams &hp = m->hparams();
  std::printf("model        %s\n", path.c_str());
  std::printf("name         %s\n", m->name().c_str());
  if (m->has_gguf()) std::printf("architecture %s (GGUF v%u)\n", hp.arch.c_str(), m->gguf().version());
  else std::printf("architecture %s (%s)\n", hp.arch.c_str(), m->format().c_str());
  std::printf("parameters   %llu (%llu bytes of weights)\n", static_cast<unsigned long long>(m->n_params()),
              static_cast<unsigned long long>(m->weight_bytes()));
  std::printf("layers       %d, embedding %d, feed-forward %d\n", hp.n_layer, hp.n_embd, hp.n_ff);
  std::printf("heads        %d query, %d KV, head size %d\n", hp.n_head, hp.n_head_kv, hp.head_dim);
  std::printf("context      %d (declared), RoPE theta %g, RMS eps %g\n", hp.n_ctx_train, hp.rope_theta, hp.rms_eps);
  std::printf("RoPE scaling %s\n", rope_scaling_describe(hp.rope).c_str());
  if (hp.sliding_window > 0)
    std::printf("window       trained with a %d-token sliding attention window; infokv attends to the whole cache\n",
                hp.sliding_window);
  std::printf("biases       %s\n", m->layer(0).bq.empty() ? (m->layer(0).bo.empty() ? "none" : "attention output")
                                                              : (m->layer(0).bo.empty() ? "q, k, v projections" : "q, k, v, o projections"));
  std::printf("tokenizer    %s, %d tokens, BOS %d, EOS %d\n", m->tokenizer().model_name().c_str(), m->tokenizer().n_vocab(),
              m->tokenizer().bos(), m->tokenizer().eos());
  std::printf("output       %s\n", m->tied_output() ? "tied to the token embedding" : "separate matrix");
  const std::map<std::string, int> &types = m->tensor_types();
  {
    const DeviceReport dr = device_report();
    std::printf("devices      cpu (%s, %s kernels); CUDA %s, %d device(s)%s%s\n", dr.cpu_arch.c_str(),
                dr.cpu_kernels.c_str(), dr.cuda_compiled ? "compiled in" : "not compiled in", dr.cuda_devices, dr.cuda_devices > 0 ? "" : ": ", dr.cuda_devices > 0 ? "" : dr.reason.c_str());
  }
  std::printf("tensors     ");
  for (const auto &kv : types) std::printf(" %s x%d", kv.first.c_str(), kv.second);
  std::printf("\n");
  return 0;
}

}  // namespace cli
}  // namespace infokv
