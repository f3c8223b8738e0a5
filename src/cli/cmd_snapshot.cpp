// infokv snapshot inspect FILE [--json]: checks a snapshot (container, checksums, verifier, invariants) and
// describes it without loading the model.
#include <cstdio>

#include "cli/args.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

int cmd_snapshot(int argc, char **argv) {
  if (argc < 3 || std::string(argv[2]) != "inspect")
    fail(Status::invalid_argument, "usage: infokv snapshot inspect FILE [--json]");
  Args a(argc, argv, 3, {}, {"json"});
  if (a.positional().size() != 1) fail(Status::invalid_argument, "usage: infokv snapshot inspect FILE [--json]");
  snapshot::FileSource f(a.positional()[0]);
  const snapshot::Summary s = snapshot::inspect(f);
  if (a.flag("json"))
    std::printf("%s\n", snapshot::summary_json(s).c_str());
  else
    std::fputs(snapshot::summary_text(s).c_str(), stdout);
  return 0;
}

}  // namespace cli
}  // namespace infokv
