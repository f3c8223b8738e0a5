# Sourced by tests/sanitize.sh and tests/tsan.sh: the repository root, the build parallelism and the Python the
# CMake configuration is given (the system one when there is one, for the bindings' Debian packages).
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
