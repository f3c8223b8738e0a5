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
// What a lock file says, so that a sweep never takes another program's `.lock` for one of ours.
constexpr char kMarker[] = "infokv spill directory lock 1\n";
constexpr size_t kMarkerLen = sizeof kMarker - 1;

// <prefix> followed by exactly 8 lowercase hex digits: the names SpillDir makes.
bool ours(const std::string &name, const std::string &prefix) {
  if (name.size() != prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  return true;
}

// A directory of this user's, mode 0700, not a symlink, whose `.lock` carries the marker and is held by nobody.
bool abandoned(const fs::path &dir, struct stat *st_out) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return false;
  bool dead = false;
  struct stat st {};
  if (::fstat(dfd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0) {
    const int fd = ::openat(dfd, kLock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {  // none: being made, or not an engine's
      char buf[kMarkerLen];
      if (::pread(fd, buf, kMarkerLen, 0) == static_cast<ssize_t>(kMarkerLen) && std::memcmp(buf, kMarker, kMarkerLen) == 0 &&
          ::flock(fd, LOCK_EX | LOCK_NB) == 0)
        dead = true;  // the lock is released when the fd closes; the directory goes right after
      ::close(fd);
    }
  }
  ::close(dfd);
  *st_out = st;
  return dead;
}

}  // namespace

int SpillDir::sweep(const std::string &parent, const std::string &prefix) {
  int removed = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!ours(it->path().filename().string(), prefix)) continue;
    struct stat st {};
    if (!abandoned(it->path(), &st)) continue;
    // the same directory still (not renamed or replaced since it was checked)
    struct stat now {};
    if (::lstat(it->path().c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (!rm) ++removed;
  }
  return removed;
}

SpillDir::SpillDir(const std::string &parent, const std::string &prefix) {
  sweep(parent, prefix);
  std::random_device rd;
  int err = 0;
  for (int i = 0; i < 16 && path_.empty(); ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%08x", static_cast<unsigned>(rd()));
    const std::string p = (fs::path(parent) / (prefix + name)).string();
    if (::mkdir(p.c_str(), 0700) == 0) path_ = p;  // 0700 from the start: the files will hold the user's K/V
    else if ((err = errno) != EEXIST) break;
  }
  if (path_.empty())
    fail(Status::io, "cannot make a spill directory under '" + parent + "'" + (err != 0 ? std::string(": ") + std::strerror(err) : ""));
  ::chmod(path_.c_str(), 0700);  // whatever the umask took away (it cannot add)
  // Written and locked under another name, then renamed: a sweep that finds `.lock` finds it held. Where the file
  // system cannot lock (some network mounts), the directory goes without one: never swept, still removed by the
  // destructor.
  const std::string tmp = path_ + "/.lock-new", lock = path_ + "/" + kLock;
  lock_fd_ = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd_ < 0) return;
  if (::write(lock_fd_, kMarker, kMarkerLen) != static_cast<ssize_t>(kMarkerLen) || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0 ||
      ::rename(tmp.c_str(), lock.c_str()) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    ::unlink(tmp.c_str());
  }
}

SpillDir::~SpillDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace infokv
