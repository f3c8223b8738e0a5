#include "util/path_confine.hpp"

#include <climits>
#include <cstdlib>
#include <dirent.h>
#include <sys/stat.h>

#include <memory>

#include "util/error.hpp"

namespace infokv {

namespace {

// realpath(3), or "" when it fails (missing, unreadable, a loop).
std::string real(const std::string &p) {
  std::unique_ptr<char, decltype(&std::free)> r(::realpath(p.c_str(), nullptr), &std::free);
  return r ? std::string(r.get()) : std::string();
}

struct DirCloser {
  void operator()(DIR *d) const { ::closedir(d); }
};

bool inside(const std::string &p, const std::string &root) {
  if (p.empty()) return false;
  if (root == "/") return true;
  return p == root || (p.size() > root.size() && p.compare(0, root.size(), root) == 0 && p[root.size()] == '/');
}

}  // namespace

std::string confine_path(const std::string &path, const std::string &allowed_dir) {
  if (allowed_dir.empty()) fail(Status::invalid_argument, "the allowed directory is empty");
  const std::string root = real(allowed_dir);
  struct stat st {};
  if (root.empty() || ::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail(Status::invalid_argument, "the allowed directory '" + allowed_dir + "' is not an existing directory");
  // Every refusal below is this one text: which files exist outside must not leak through it.
  auto refuse = [&]() { fail(Status::io, "model_path '" + path + "' does not name a model inside the allowed directory"); };
  if (path.empty() || path.find('\0') != std::string::npos) refuse();
  const std::string target = real(path[0] == '/' ? path : root + "/" + path);
  if (!inside(target, root) || ::stat(target.c_str(), &st) != 0) refuse();
  if (S_ISDIR(st.st_mode)) {
    std::unique_ptr<DIR, DirCloser> d(::opendir(target.c_str()));
    if (!d) refuse();
    while (const dirent *e = ::readdir(d.get())) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string entry = real(target + "/" + name);
      // A dangling link is refused too: it cannot be loaded, and what it pointed at is no business of the config.
      if (!inside(entry, root)) refuse();
    }
  }
  return target;
}

}  // namespace infokv
