// Confining paths that come from configs (data an embedder may not trust) to one directory.
#pragma once
#include <string>

namespace infokv {

// The canonical path (realpath: no symlink, no "." or "..") of `path` when it names an existing file or
// directory inside `allowed_dir` (or the directory itself); a relative `path` is taken relative to allowed_dir.
// When the target is a directory (a Hugging Face checkpoint), each of its entries must resolve inside too, so a
// link in it cannot pull in a file from elsewhere.
// Throws Error(invalid_argument) when allowed_dir is empty or not an existing directory (the embedder's own
// setting), and Error(io) with one fixed text, "model_path '<path>' does not name a model inside the allowed
// directory", for a path that is missing, unreadable, escapes (by "..", an absolute path or a symlink) or holds
// an escaping link: the message and status never tell which, so a config cannot probe which files exist outside.
std::string confine_path(const std::string &path, const std::string &allowed_dir);

}  // namespace infokv
