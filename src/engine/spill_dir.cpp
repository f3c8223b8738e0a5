#include "engine/spill_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "util/error.hpp"

namespace infokv {

namespace fs = std::filesystem;

namespace {
constexpr const char *kLock = ".lock";
}  // namespace

int SpillDir::sweep(const std::string &parent, const std::string &prefix) {
  int removed = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const std::string lock = (it->path() / kLock).string();
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // no lock file: being made, or not an engine's
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // nobody holds it: its engine is gone
      std::error_code rm;
      if (fs::remove_all(it->path(), rm) != static_cast<std::uintmax_t>(-1) && !rm) ++removed;
    }
    ::close(fd);
  }
  return removed;
}

SpillDir::SpillDir(const std::string &parent, const std::string &prefix) {
  sweep(parent, prefix);
  std::random_device rd;
  std::error_code ec;
  for (int i = 0; i < 16 && path_.empty(); ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%08x", static_cast<unsigned>(rd()));
    const fs::path p = fs::path(parent) / (prefix + name);
    if (fs::create_directory(p, ec) && !ec) path_ = p.string();
  }
  if (path_.empty()) fail(Status::io, "cannot make a spill directory under '" + parent + "'");
  fs::permissions(path_, fs::perms::owner_all, fs::perm_options::replace, ec);  // K/V is the user's data
  // Locked under another name, then renamed: a sweep that finds `.lock` finds it held.
  const std::string tmp = path_ + "/.lock-new", lock = path_ + "/" + kLock;
  lock_fd_ = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0 || ::rename(tmp.c_str(), lock.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    fs::remove_all(path_, ec);
    fail(Status::io, "cannot lock the spill directory '" + path_ + "': " + why);
  }
}

SpillDir::~SpillDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  ::close(lock_fd_);
}

}  // namespace infokv
