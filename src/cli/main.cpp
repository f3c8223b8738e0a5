// The infokv command-line tool.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "cli/args.hpp"
#include "util/error.hpp"
#include "util/version.hpp"

namespace {

const char *kUsage =
    "usage: infokv <command> [options]\n"
    "\n"
    "commands:\n"
    "  info        --model PATH [--json]                      architecture, sizes, tokenizer, tensor types\n"
    "  generate    --model PATH --prompt TEXT [options]       generate a continuation; --chat [--system TEXT]\n"
    "              makes the prompt the user turn of a chat in the model's format\n"
    "  chat        --model PATH [--system TEXT] [--protect system|fair|none] [--max-tokens N] [sampling and\n"
    "              session options]  interactive chat in the model's chat format (ChatML, Llama 3), streamed;\n"
    "              reads stdin; the system prompt and the template's control tokens are protected by default\n"
    "  bench       -m MODEL[,..] -p 512 -n 128 -t 1,2 -r 5 [-d DEPTH] [-ctk f16] [--policy P --budget B] [-o json]\n"
    "              prompt and generation speed, measured as llama-bench measures it (its field names in JSON)\n"
    "  bench --trace [--model M --conversations 64 --fits 8 --turns 2 --gen 32 --strategies LIST\n"
    "              --max-prefill N --prefix-cache --spill-dir DIR --report-dir DIR\n"
    "              --json]\n"
    "              many conversations over a pool that holds --fits of them: each strategy (fail, recompute, move,\n"
    "              compress, auto) against unlimited memory: completed, time, TTFT, latency, bytes moved, KL\n"
    "  serve       [--model M --host 127.0.0.1 --port 8080 --api-key KEY --cache-dir DIR --redis HOST:PORT\n"
    "              --max-batch 8 --max-prefill 256]\n"
    "              an OpenAI-compatible server (/v1/chat/completions, /v1/completions, /v1/models, /health,\n"
    "              /metrics) on the engine: many clients over one KV pool, nothing failed while memory can be found\n"
    "  bench --prefix [--model M --tokens 2048 --redis HOST:PORT --disk DIR]  time to first token of a\n"
    "              request whose prefix was seen before: prefilled, or from the prefix cache in memory, disk, Redis\n"
    "  eval-chat   --model PATH --cases F.jsonl [--policies LIST --budgets LIST --protect none,system,fair]\n"
    "              what compression does to instructions: KL, top-1, exact answers, compliance, leakage\n"
    "  eval-retrieval --model PATH [--tasks LIST --context 2048 --cases 8 --policies LIST --budgets LIST]\n"
    "              retrieval after compression (RULER's needle tasks and variable tracking, generated from a text):\n"
    "              the context is compressed, then the question asked; accuracy, KV bytes held, compression cost\n"
    "  perplexity  --model PATH --file PATH [--max-tokens N] [--activations f32|int8|int16|compare|compare-prefill]\n"
    "              [--kv-compare q8_0,q4_0]  perplexity of a text; compare feeds it one token at a time under each\n"
    "              decode arithmetic: KL to f32, top-1; --kv-compare runs it with each KV dtype beside --kv-dtype's\n"
    "              (default f16): KL, top-1, perplexity\n"
    "  eval        --model PATH --file PATH --prefix N --continuation M --policies LIST --budgets LIST\n"
    "              compression quality: KL to the full cache, top-1 agreement, perplexity, KV bytes\n"
    "  tune        --model PATH --file PATH --out PROFILE [--tag T] [--prefix 400 --continuation 100 --windows 8\n"
    "              --offset 0 --budgets 0.25,0.125 --max-losses 0.005,0.01,0.02]  run auto over windows of a text as\n"
    "              eval does and write what it learned (per-layer budget shares, evidence counts, proxy loss -> KL)\n"
    "              as a tuning profile; --profile PROFILE hands it to generate, chat and eval\n"
    "  tokenize    --model PATH (--text T | --file F) [--json] [--pieces] [--bos] [--special]\n"
    "              the token ids of a text (text is text: \"<|im_start|>\" stays characters; --special makes\n"
    "              control-token texts those tokens);\n"
    "              PATH may be a GGUF file or a Hugging Face directory (tokenizer.json is enough, no weights read)\n"
    "  synth       --preset P --out FILE.gguf [--layers N] [--dtype f16|bf16|f32] [--seed S]  random weights at a\n"
    "              real model's shapes and config (RoPE scaling, biases); P: llama-3.2-1b, llama-3.2-3b,\n"
    "              llama-3.1-8b, qwen2.5-0.5b, tinyllama-1.1b, mistral-7b, smollm2-135m, stories260k\n"
    "              --format safetensors --out DIR writes the same model as a Hugging Face checkpoint\n"
    "              (model.safetensors, config.json, tokenizer.json, tokenizer_config.json)\n"
    "  snapshot    inspect FILE [--json]                       check a snapshot and describe it (no model needed)\n"
    "  version     [--json]                                   print the version\n"
    "\n"
    "--model defaults to $INFOKV_MODELS_DIR/stories260K/stories260K.gguf (INFOKV_MODELS_DIR defaults to\n"
    "../shared/models). --model smollm2 names SmolLM2-135M-Instruct as installed by packaging/fetch_models.sh\n"
    "(e.g. infokv chat --model smollm2). Every command takes --json for machine-readable output on stdout.\n"
    "generate, perplexity and eval take --config FILE.json (schemas/config.fbs); flags given override it.\n"
    "generate --save-snapshot FILE saves the sequence after generating; --load-snapshot FILE continues from one\n"
    "(--prompt is then optional and appended when given; the snapshot's policy, KV dtype and sampler are used\n"
    "unless --config or a flag sets them).\n";

const char *kOptions =
    "\n"
    "generate: --prompt TEXT --max-tokens N (64) --temperature T (0.8; 0 is greedy) --top-k K (40) --top-p P (0.95)\n"
    "          --min-p P (0.05) --repeat-penalty R (1) --repeat-last-n N (64) --seed S (0) --parallel N (1)\n"
    "          --protect-prefix N --no-bos --special (control-token texts in --prompt become those tokens)\n"
    "          --chat --system TEXT --save-snapshot FILE --load-snapshot FILE\n"
    "          --plot F.svg (KV bytes and process RSS after every token)\n"
    "session:  --threads N (cores) --device cpu|cuda|cuda:N|auto (cpu) --kv-dtype f32|f16|bf16|q8_0|q4_0 (f16)\n"
    "          --block-size B (16) --kv-pool-mb M | --kv-pool-blocks N | --kv-pool-fraction F --ubatch N (256) --config FILE\n"
    "compress: --policy none|infokv|snapkv|h2o|streaming|tova|pyramidkv|auto|kvzip --budget 0.25|25%|128\n"
    "          --question later|next|both (later; eval and tune: next): whose queries rank the tokens: a probe\n"
    "          question's standing in for one asked later (later), the latest tokens' (next), or both\n"
    "          (--budget or --max-loss without --policy: auto)\n"
    "          --max-loss E (auto only: a quality target instead of --budget; each compression keeps, per layer, as\n"
    "          few tokens as hold auto's proxy loss at or under E)\n"
    "          --compress-interval N (default 0 or 1024: whenever a sequence holds more than its budget plus a\n"
    "          slack of a quarter of it; another N: every N tokens) --window W (min(32, budget/4)) --alpha A (0.9)\n"
    "          --tau T (1)\n"
    "          --entropy-top-k K (256) --pool-kernel-prefill 5 --pool-kernel-decode 7\n"
    "          --budget-shape uniform|pyramid --beta B (20) --sink N (4)\n"
    "          --layer-precision auto|off (auto: under a byte budget, auto may hold a layer at q8_0 beside a float\n"
    "          cache where that keeps more than it loses; off: every layer in --kv-dtype)\n"
    "          --profile FILE (a tuning profile from `infokv tune`: auto starts each layer from its recorded share)\n"
    "eval:     --prefix N --continuation M --policies LIST --budgets LIST --windows K (1) --offset T (0) --plot F.svg\n"
    "          --chunked-prefill (prefill the prefix as generate does: in --ubatch chunks, compressed part-way\n"
    "          only past 4x its budget or when the pool is short, then at its end)\n"
    "          --max-losses E1,E2 (also auto under each quality target, no budget: the bytes it reached)\n"
    "          --profile FILE is refused (exit 2) on the tokens of the text it was tuned on\n"
    "tune:     --out FILE --tag T --prefix N (400) --continuation M (100) --windows K (8) --offset T (0)\n"
    "          --budgets LIST (0.25,0.125) --max-losses LIST (0.005,0.01,0.02) --json\n"
    "eval-chat: --cases F.jsonl (one case a line: {\"system\", \"user\", \"check\": {\"kind\", \"value\"}, \"history\",\n"
    "          \"probe\": \"leak\"}; packaging/eval/chat_cases.jsonl) --policies LIST (snapkv,h2o,streaming,tova,\n"
    "          infokv,auto) --budgets LIST (0.5,0.25,0.125) --protect LIST (none,system,fair) --history-tokens N\n"
    "          (512: filler turns from --filler FILE, default $INFOKV_CORPORA_DIR/emma.txt, when a case has no\n"
    "          history) --max-answer N (64) --limit K (first K cases) --threads N --json --plot F.svg\n"
    "eval-retrieval: --haystack FILE (default $INFOKV_CORPORA_DIR/emma.txt) --tasks LIST (niah_single,niah_multikey,\n"
    "          niah_multivalue,niah_multiquery,vt) --context N (2048 tokens) --cases K (8 per task, needle depths\n"
    "          5%..95%) --seed S (1) --policies LIST (snapkv,streaming,tova,auto) --budgets LIST (0.5,0.25,0.125)\n"
    "          --query after|inside (after: the question is a new turn after compression) --json --plot F.svg\n"
    "          --protect system|none|fair (system: what the chat API protects by default) --verbose (every answer\n"
    "          on stderr)\n";

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  // The CLI's models folder: $INFOKV_MODELS_DIR, or ../shared/models (the repository's layout) when unset. Set here
  // once, so --model's default and a config's relative model_path (the library's rule) both see it.
  if (const char *d = std::getenv("INFOKV_MODELS_DIR"); d == nullptr || *d == '\0') ::setenv("INFOKV_MODELS_DIR", "../shared/models", 1);
  const std::string cmd = argv[1];
  static const char *const kCommands[] = {"info", "generate", "perplexity", "eval", "tokenize", "synth",
                                          "snapshot", "chat", "tune", "eval-chat", "eval-retrieval", "bench", "serve", "version",
                                          "--version"};
  bool known = false;
  for (const char *c : kCommands) known = known || cmd == c;
  if (!known) {  // before --help, so that `infokv typo --help` is an error, not a help page
    std::fprintf(stderr, "infokv: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  }
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      std::fputs(kOptions, stdout);
      return 0;
    }
  try {
    if (cmd == "info") return infokv::cli::cmd_info(argc, argv);
    if (cmd == "generate") return infokv::cli::cmd_generate(argc, argv);
    if (cmd == "perplexity") return infokv::cli::cmd_perplexity(argc, argv);
    if (cmd == "eval") return infokv::cli::cmd_eval(argc, argv);
    if (cmd == "tokenize") return infokv::cli::cmd_tokenize(argc, argv);
    if (cmd == "synth") return infokv::cli::cmd_synth(argc, argv);
    if (cmd == "snapshot") return infokv::cli::cmd_snapshot(argc, argv);
    if (cmd == "chat") return infokv::cli::cmd_chat(argc, argv);
    if (cmd == "tune") return infokv::cli::cmd_tune(argc, argv);
    if (cmd == "eval-chat") return infokv::cli::cmd_eval_chat(argc, argv);
    if (cmd == "eval-retrieval") return infokv::cli::cmd_eval_retrieval(argc, argv);
    if (cmd == "bench") return infokv::cli::cmd_bench(argc, argv);
    if (cmd == "serve") return infokv::cli::cmd_serve(argc, argv);
    if (cmd == "version" || cmd == "--version") {
      infokv::cli::Args a(argc, argv, 2, {}, {"json"});
      if (a.flag("json"))
        std::printf("{\"version\":\"%s\",\"version_number\":%d}\n", infokv::kVersionString, static_cast<int>(infokv::kVersionNumber));
      else
        std::printf("infokv %s\n", infokv::kVersionString);
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
