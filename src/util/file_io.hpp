// Files that users and embedding apps hand over. Reads open only regular files: a FIFO would block the open (or
// the read) forever and a device such as /dev/zero never ends. Writes go through AtomicFile, so a reader of the
// destination sees either the old file or a complete new one, never half of one or a mix of two writers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace infokv {

// A read-only descriptor on a regular file (RAII). The open cannot block (O_NONBLOCK until fstat has shown a
// regular file; a FIFO's open would wait for a writer). Throws Error(io): "cannot open 'p': ..." or
// "'p' is not a regular file".
class RegularFile {
 public:
  explicit RegularFile(const std::string &path);
  ~RegularFile();
  RegularFile(RegularFile &&other) noexcept;
  RegularFile(const RegularFile &) = delete;
  RegularFile &operator=(const RegularFile &) = delete;
  RegularFile &operator=(RegularFile &&) = delete;
  int fd() const { return fd_; }
  int64_t size() const { return size_; }  // at the open
  int release() noexcept;                 // the caller owns the descriptor from here

 private:
  int fd_ = -1;
  int64_t size_ = 0;
};

// The whole of a regular file. Error(io) when it is not one, or holds more than max_bytes ("<what> 'p' is larger
// than N bytes"); the limit is checked while reading too, so a file that grows cannot exceed it.
std::string read_regular_file(const std::string &path, int64_t max_bytes = INT64_MAX, const char *what = "file");

// Writes `path` atomically and durably. The bytes go to a temporary in the destination's directory that no other
// writer can share and that is never a planted link: an unnamed O_TMPFILE where the file system and /proc allow,
// given a unique name (`.<name>.<random>.tmp`, created with O_EXCL) only at commit; otherwise that named file from
// the start. New files get mode 0666 & ~umask, like any new file. commit() fsyncs the file, renames it over `path`
// and fsyncs the directory (Sync::scratch: renames only, for files that need not outlive the process, such as the
// engine's spill files: whole or absent under `path` for other processes and after this one is killed, but after a
// crash of the machine possibly absent, empty or partial). Every
// failure, and destruction without commit(), removes the temporary; a process killed during the writes leaves nothing
// behind where O_TMPFILE works (a `.<name>.*.tmp` file elsewhere). Throws Error(io).
class AtomicFile {
 public:
  enum class Temp { automatic, named };  // named: skip O_TMPFILE (tests cover the fallback with it)
  enum class Sync { durable, scratch };
  explicit AtomicFile(const std::string &path, Temp temp = Temp::automatic, Sync sync = Sync::durable);
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;
  void write(const void *p, size_t n);
  void commit();
  // Whether `entry` (a name in a directory) is a temporary that an AtomicFile writing `dest_name` would create.
  static bool is_temp_of(const std::string &entry, const std::string &dest_name);

 private:
  void flush();
  void link_temp();  // gives an unnamed temporary its unique name
  void discard() noexcept;
  std::string path_, dir_, base_, tmp_;  // tmp_: empty while the temporary has no name
  int fd_ = -1;
  bool committed_ = false;
  Sync sync_;
  std::vector<uint8_t> buf_;  // the snapshot framing writes a few bytes at a time: one syscall per 64 KiB instead
};

}  // namespace infokv
