#include "util/file_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.hpp"
#include "util/fault_injection.hpp"

namespace infokv {

namespace {

std::string why() { return std::strerror(errno); }

// Retries a system call interrupted by a signal.
template <typename F>
auto no_eintr(F f) -> decltype(f()) {
  decltype(f()) r;
  do r = f();
  while (r < 0 && errno == EINTR);
  return r;
}

constexpr size_t kTempBaseMax = 100;  // keeps `.<name>.<random>.tmp` under NAME_MAX for any destination name
constexpr size_t kRandomChars = 12;
constexpr size_t kBufferBytes = size_t{1} << 16;

std::string random_chars() {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string s;
  for (size_t i = 0; i < kRandomChars; ++i) s += kAlphabet[rd() % (sizeof kAlphabet - 1)];
  return s;
}

std::string temp_prefix(const std::string &base) { return "." + base.substr(0, kTempBaseMax) + "."; }

}  // namespace

// ---- reading ----

RegularFile::RegularFile(const std::string &path) {
  fd_ = no_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC); });
  if (fd_ < 0) fail(Status::io, "cannot open '" + path + "': " + why());
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const std::string e = why();
    ::close(fd_);
    fail(Status::io, "cannot stat '" + path + "': " + e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(Status::io, "'" + path + "' is not a regular file (a FIFO, device or directory cannot be read as one)");
  }
  // Back to blocking reads: O_NONBLOCK only had to keep the open from waiting.
  const int fl = ::fcntl(fd_, F_GETFL);
  if (fl >= 0) ::fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK);
  size_ = static_cast<int64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile &&other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }

int RegularFile::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string read_regular_file(const std::string &path, int64_t max_bytes, const char *what) {
  RegularFile f(path);
  auto too_large = [&] {
    fail(Status::io, std::string(what) + " '" + path + "' is larger than the limit of " + std::to_string(max_bytes) + " bytes");
  };
  if (f.size() > max_bytes) too_large();
  std::string out;
  out.reserve(static_cast<size_t>(f.size()));
  char buf[65536];
  for (;;) {
    const ssize_t k = no_eintr([&] { return ::read(f.fd(), buf, sizeof buf); });
    if (k < 0) fail(Status::io, "cannot read '" + path + "': " + why());
    if (k == 0) break;
    if (static_cast<int64_t>(out.size()) + k > max_bytes) too_large();
    out.append(buf, static_cast<size_t>(k));
  }
  return out;
}

// ---- writing ----

AtomicFile::AtomicFile(const std::string &path, Temp temp, Sync sync) : path_(path), sync_(sync) {
  const size_t slash = path.rfind('/');
  dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  base_ = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base_.empty() || base_ == "." || base_ == "..") fail(Status::io, "cannot write '" + path + "': not a file name");
#ifdef O_TMPFILE
  // linkat() names the unnamed file through /proc/self/fd; without /proc that would fail at the very end.
  if (temp == Temp::automatic && ::access("/proc/self/fd", X_OK) == 0) {
    fd_ = no_eintr([&] { return ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666); });
    if (fd_ >= 0) return;
    // Not supported by this file system (EOPNOTSUPP, EISDIR, EINVAL): the named temporary below.
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) fail(Status::io, "cannot create a file in '" + dir_ + "': " + why());
  }
#else
  (void)temp;
#endif
  for (int attempt = 0; fd_ < 0; ++attempt) {
    tmp_ = dir_ + "/" + temp_prefix(base_) + random_chars() + ".tmp";
    fd_ = no_eintr([&] { return ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666); });
    if (fd_ < 0 && (errno != EEXIST || attempt >= 100)) {
      const std::string e = why();
      tmp_.clear();
      fail(Status::io, "cannot create a temporary file for '" + path_ + "' in '" + dir_ + "': " + e);
    }
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

void AtomicFile::write(const void *p, size_t n) {
  if (fd_ < 0) fail(Status::internal, "write to '" + path_ + "' after commit");
  const auto *b = static_cast<const uint8_t *>(p);
  if (buf_.size() + n <= kBufferBytes) {
    buf_.insert(buf_.end(), b, b + n);
    return;
  }
  flush();
  if (n < kBufferBytes) {
    buf_.assign(b, b + n);
    return;
  }
  for (size_t done = 0; done < n;) {
    const ssize_t k = fault::hit(fault::Op::write) ? -1 : no_eintr([&] { return ::write(fd_, b + done, n - done); });
    if (k < 0) fail(Status::io, "cannot write '" + path_ + "': " + why());
    done += static_cast<size_t>(k);
  }
}

void AtomicFile::flush() {
  for (size_t done = 0; done < buf_.size();) {
    const ssize_t k =
        fault::hit(fault::Op::write) ? -1 : no_eintr([&] { return ::write(fd_, buf_.data() + done, buf_.size() - done); });
    if (k < 0) fail(Status::io, "cannot write '" + path_ + "': " + why());
    done += static_cast<size_t>(k);
  }
  buf_.clear();
}

void AtomicFile::link_temp() {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd_);
  for (int attempt = 0;; ++attempt) {
    tmp_ = dir_ + "/" + temp_prefix(base_) + random_chars() + ".tmp";
    // linkat never follows or replaces what is at the new name: EEXIST, another name.
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) == 0) return;
    const int e = errno;
    tmp_.clear();
    if (e != EEXIST || attempt >= 100) {
      errno = e;
      fail(Status::io, "cannot name the temporary file for '" + path_ + "': " + why());
    }
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) fail(Status::internal, "commit of '" + path_ + "' twice");
  try {
    flush();
    if (sync_ == Sync::durable && (fault::hit(fault::Op::fsync) || ::fsync(fd_) != 0))
      fail(Status::io, "cannot write '" + path_ + "' to disk: " + why());
    if (tmp_.empty()) link_temp();
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail(Status::io, "cannot write '" + path_ + "': " + why());
    }
    fd_ = -1;
    if (fault::hit(fault::Op::rename) || ::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail(Status::io, "cannot replace '" + path_ + "': " + why());
  } catch (...) {
    discard();
    throw;
  }
  committed_ = true;
  tmp_.clear();
  if (sync_ == Sync::scratch) return;
  // The rename is durable only once the directory is on disk. The file is in place already, so a directory that
  // cannot be synced (some file systems refuse fsync on directories with EINVAL) is not reported as a failure.
  const int dfd = no_eintr([&] { return ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int e = errno;
    ::close(dfd);
    if (rc != 0 && e == EIO) fail(Status::io, "'" + path_ + "' was replaced but its directory could not be written to disk");
  }
}

bool AtomicFile::is_temp_of(const std::string &entry, const std::string &dest_name) {
  const std::string pre = temp_prefix(dest_name);
  if (entry.size() != pre.size() + kRandomChars + 4 || entry.compare(0, pre.size(), pre) != 0 ||
      entry.compare(entry.size() - 4, 4, ".tmp") != 0)
    return false;
  return std::all_of(entry.begin() + static_cast<long>(pre.size()), entry.end() - 4,
                     [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
}

}  // namespace infokv
