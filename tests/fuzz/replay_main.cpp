// A main() for the fuzz targets in ordinary (GCC or clang, sanitized or not) builds: runs LLVMFuzzerTestOneInput on
// each file named on the command line, and on every file inside each directory named, in name order. The test
// suite uses it to replay the golden files and the regression inputs under tests/data/fuzz/<target>/ (a fuzzer's
// findings, once fixed) on every run, ASan+UBSan included; a target aborts on a bug, so a regression fails the test.
// Zero inputs is an error, so a missing directory cannot pass silently.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> in;
      for (const auto &e : fs::directory_iterator(p))
        if (e.is_regular_file()) in.push_back(e.path());
      std::sort(in.begin(), in.end());
      files.insert(files.end(), in.begin(), in.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  for (const fs::path &f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("replay: %s (%zu bytes)\n", f.string().c_str(), b.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  std::printf("replay: %zu input%s, no finding\n", files.size(), files.size() == 1 ? "" : "s");
  return 0;
}
