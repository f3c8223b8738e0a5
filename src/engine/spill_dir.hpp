// The directory an engine writes its moved-out conversations to: one of its own, made 0700 (the files hold the
// user's K/V), removed when the engine goes. A process that is killed runs no destructor, so its directory would stay
// behind; each directory therefore holds a lock for as long as its engine lives (flock on `.lock`, released by the
// kernel when the process dies, whatever kills it), and every engine starting in the same parent first removes the
// directories of its kind whose lock nobody holds.
#pragma once
#include <string>

namespace infokv {

class SpillDir {
 public:
  // Makes parent/<prefix><8 hex digits>, locked, after sweep(parent, prefix). Throws Error(io) when the parent
  // cannot hold it.
  SpillDir(const std::string &parent, const std::string &prefix);
  ~SpillDir();  // removes the directory and everything in it
  SpillDir(const SpillDir &) = delete;
  SpillDir &operator=(const SpillDir &) = delete;

  const std::string &path() const { return path_; }

  // Removes the directories directly under parent named <prefix><8 hex digits>, owned by this user, mode 0700, not
  // symlinks, whose `.lock` carries SpillDir's marker and is held by no process: an engine's that died. Anything
  // else (a directory without a `.lock`, being made or made by another program; a file; another name) is left alone.
  // The spill directory must be on a host-local file system (flock on some network mounts is local to each host).
  // Returns how many it removed; never throws.
  static int sweep(const std::string &parent, const std::string &prefix);

 private:
  std::string path_;
  int lock_fd_ = -1;
};

}  // namespace infokv
