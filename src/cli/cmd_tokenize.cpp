// infokv tokenize: the token ids of a text, for checking the tokenizer against another implementation.
#include <cstdio>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

int cmd_tokenize(int argc, char **argv) {
  Args a(argc, argv, 2, {"model", "text", "file"}, {"json", "bos", "special", "no-special", "pieces"});
  if (a.has("text") == a.has("file")) fail(Status::invalid_argument, "give exactly one of --text T and --file F");
  const std::string text = a.has("text") ? a.str("text") : read_file(a.str("file"));
  // Only the tokenizer is needed (a GGUF file or a Hugging Face directory): the weights are not checked or touched.
  const Tokenizer tok = Model::load_tokenizer(resolve_model_path(a.str("model", default_model_path())));
  // Text is text by default (as ikv_tokenize): --special parses control-token texts; --no-special, the default,
  // is still accepted.
  if (a.flag("special") && a.flag("no-special")) fail(Status::invalid_argument, "give at most one of --special and --no-special");
  const std::vector<int32_t> ids = tok.encode(text, a.flag("bos"), a.flag("special"));
  if (a.flag("json")) {
    JsonObject o;
    o.integer("n_tokens", static_cast<int64_t>(ids.size())).ints("ids", ids);
    std::printf("%s\n", o.dump().c_str());
  } else if (a.flag("pieces")) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, json_str(tok.token_bytes(id)).c_str());
  } else {
    for (size_t k = 0; k < ids.size(); ++k) std::printf(k ? " %d" : "%d", ids[k]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
