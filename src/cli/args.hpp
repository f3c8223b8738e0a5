// Command-line parsing for the infokv tool: --name value / --name=value / boolean --flag.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace infokv {
namespace cli {

class Args {
 public:
  // `flags` take no value; every other option takes one. Unknown options are errors (Error(invalid_argument)).
  Args(int argc, char **argv, int first, const std::set<std::string> &valued, const std::set<std::string> &flags);
  bool has(const std::string &name) const { return values_.count(name) != 0 || flags_.count(name) != 0; }
  std::string str(const std::string &name, const std::string &fallback = "") const;
  std::string required(const std::string &name) const;
  int64_t integer(const std::string &name, int64_t fallback, int64_t lo, int64_t hi) const;
  double number(const std::string &name, double fallback, double lo, double hi) const;
  bool flag(const std::string &name) const { return flags_.count(name) != 0; }
  const std::vector<std::string> &positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

std::vector<std::string> split_list(const std::string &s);  // "a,b, c" -> {"a","b","c"}
std::string read_file(const std::string &path);               // a regular file only; throws Error(io)
std::string default_model_path();                             // $INFOKV_MODELS_DIR or ../shared/models, stories260K
// Short names for the models the project's setup installs: "stories260K", and "smollm2" ($INFOKV_SMOLLM2, else
// $INFOKV_MODEL_CACHE or ~/.cache/infokv/models, where packaging/fetch_models.sh puts it). Other text is a path.
std::string resolve_model_path(const std::string &name);

int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_eval_chat(int argc, char **argv);
int cmd_eval_retrieval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);  // src/cli/cmd_serve.cpp
int cmd_bench_trace(int argc, char **argv);   // bench --trace (src/cli/cmd_bench_trace.cpp)
int cmd_bench_prefix(int argc, char **argv);  // bench --prefix (same file)

}  // namespace cli
}  // namespace infokv

#include <optional>

#include "compress/profile.hpp"
#include "config/config.hpp"
#include "session/session.hpp"

namespace infokv {
namespace cli {

// Options shared by the commands that build a session (threads, KV layout, compression policy, --config FILE).
const std::set<std::string> &session_option_names();
// --config FILE (JSON, or the binary form) as the base, each flag given overriding it.
SessionOptions session_options_from(const Args &a);
SessionOptions session_options_from(const Args &a, const SessionOptions &base);
// The --policy/--budget/--max-loss/... part alone (policy none when neither --policy nor the base sets one).
CompressionConfig compression_from(const Args &a);
CompressionConfig compression_from(const Args &a, const CompressionConfig &base);
// The config named by --config (defaults without one). Throws Error(invalid_argument) naming the file and field.
Config config_from_args(const Args &a);
// --model, else the config's model_path, else default_model_path().
std::string model_path_from(const Args &a);
// --profile FILE: the tuning profile read and checked (nullopt without the option); apply_profile sets it on a
// session (Error(wrong_model) for another model's profile).
std::optional<TuningProfile> profile_from_args(const Args &a);
void apply_profile(const std::optional<TuningProfile> &p, Session &s);
// "0.25" -> fraction, "128" (an integer > 1) -> tokens; "25%" -> fraction.
void parse_budget(const std::string &s, double *fraction, int32_t *tokens);

}  // namespace cli
}  // namespace infokv
