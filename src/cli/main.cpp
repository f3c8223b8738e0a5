// The infokv command-line tool.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "capi/include/infokv/infokv.h"
#include "cli/args.hpp"
#include "util/error.hpp"

namespace {

const char *kUsage =
    "usage: infokv <command> [options]\n"
    "\n"
    "commands:\n"
    "  info        --model PATH [--json]                      architecture, sizes, tokenizer, tensor types\n"
    "  generate    --model PATH --prompt TEXT [options]       generate a continuation; --chat [--system TEXT]\n"
    "              makes the prompt the user turn of a chat in the model's format\n"
    "  chat        --model PATH [--system TEXT] [--max-tokens N] [sampling and session options]\n"
    "              interactive chat in the model's chat format (ChatML, Llama 3), streamed; reads stdin\n"
    "  perplexity  --model PATH --file PATH [--max-tokens N]  perplexity of a text\n"
    "  eval        --model PATH --file PATH --prefix N --continuation M --policies LIST --budgets LIST\n"
    "              compression quality: KL to the full cache, top-1 agreement, perplexity, KV bytes\n"
    "  tokenize    --model PATH (--text T | --file F) [--json] [--pieces] [--bos] [--no-special]\n"
    "              the token ids of a text (special-token texts become those tokens unless --no-special)\n"
    "  version     print the version\n"
    "\n"
    "--model defaults to $INFOKV_MODELS_DIR/stories260K/stories260K.gguf (INFOKV_MODELS_DIR defaults to\n"
    "../shared/models). --model smollm2 names SmolLM2-135M-Instruct as installed by packaging/fetch_models.sh\n"
    "(e.g. infokv chat --model smollm2). Every command takes --json for machine-readable output on stdout.\n";

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "info") return infokv::cli::cmd_info(argc, argv);
    if (cmd == "generate") return infokv::cli::cmd_generate(argc, argv);
    if (cmd == "perplexity") return infokv::cli::cmd_perplexity(argc, argv);
    if (cmd == "eval") return infokv::cli::cmd_eval(argc, argv);
    if (cmd == "tokenize") return infokv::cli::cmd_tokenize(argc, argv);
    if (cmd == "chat") return infokv::cli::cmd_chat(argc, argv);
    if (cmd == "version" || cmd == "--version") {
      std::printf("infokv %s\n", IKV_VERSION_STRING);
      return 0;
    }
    std::fprintf(stderr, "infokv: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const infokv::Error &e) {
    std::fprintf(stderr, "infokv %s: error: %s\n", cmd.c_str(), e.what());
    return e.status() == infokv::Status::invalid_argument ? 2 : 1;
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "infokv %s: error: out of memory\n", cmd.c_str());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "infokv %s: internal error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
