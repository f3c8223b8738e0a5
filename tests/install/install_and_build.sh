#!/bin/sh
# Installs the build tree into a temporary prefix, builds samples/c/generate.c against the installed files two
# ways (pkg-config + cc, and a CMake consumer using find_package(infokv)), and runs both greedily on stories260K.
# With PYTHON (and the bindings built), also imports the installed Python package from the prefix and generates.
# usage: install_and_build.sh BUILD_DIR SOURCE_DIR MODELS_DIR [CMAKE] [CC] [PYTHON]
set -eu
build=$1
src=$2
models=$3
cmake=${4:-cmake}
cc=${5:-cc}
python=${6:-}
model="$models/stories260K/stories260K.gguf"
expect="Once upon a time, there was a little girl named Lily"

[ -f "$model" ] || { echo "FAIL: model $model is missing (set INFOKV_MODELS_DIR)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/infokv-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; exit 1; }

# What the issue promises under the prefix.
for f in bin/infokv include/infokv/infokv.h; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $prefix/$f not installed" >&2; exit 1; }
done
pc=$(find "$prefix" -name infokv.pc | head -n 1)
cfg=$(find "$prefix" -name infokvConfig.cmake | head -n 1)
cfgv=$(find "$prefix" -name infokvConfigVersion.cmake | head -n 1)
lib=$(find "$prefix" -name 'libinfokv.so' | head -n 1)
for v in pc cfg cfgv lib; do
  eval "x=\$$v"
  [ -n "$x" ] || { echo "FAIL: no $v file under $prefix" >&2; exit 1; }
done
libdir=$(dirname "$lib")
soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
[ -n "$soname" ] || { echo "FAIL: $lib has no SONAME" >&2; exit 1; }

check_output() {  # $1: label, $2: output file
  if grep -qF "$expect" "$2"; then
    echo "ok: $1 produced the reference greedy text"
  else
    echo "FAIL: $1 output lacks '$expect':" >&2
    cat "$2" >&2
    exit 1
  fi
}

# 1. pkg-config + cc, strict C99. The .pc is relocatable (its prefix comes from ${pcfiledir}), so installing
#    to a temporary prefix needs no --define-prefix.
pcdir=$(dirname "$pc")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs infokv)
echo "pkg-config: $flags"
# shellcheck disable=SC2086
# No -Wl,-rpath here and no LD_LIBRARY_PATH: the .pc's Libs carry the rpath to the prefix (INFOKV_PC_RPATH).
"$cc" -std=c99 -Wall -Wextra -pedantic -Werror "$src/samples/c/generate.c" $flags -o "$tmp/generate_pc"
unset LD_LIBRARY_PATH
"$tmp/generate_pc" "$model" "Once upon a time" 40 >"$tmp/out_pc.txt" 2>"$tmp/err_pc.txt" ||
  { cat "$tmp/err_pc.txt" >&2; exit 1; }
check_output "pkg-config build" "$tmp/out_pc.txt"
grep -q "kv: sequence holds" "$tmp/err_pc.txt" || { echo "FAIL: no KV accounting printed" >&2; exit 1; }
cat "$tmp/err_pc.txt"
# The installed CLI runs from the prefix on its own (the core is linked into it; no libinfokv.so to find).
"$prefix/bin/infokv" generate --model "$model" --prompt "Once upon a time" --max-tokens 40 --temperature 0 \
  >"$tmp/out_cli.txt" 2>"$tmp/err_cli.txt" || { cat "$tmp/err_cli.txt" >&2; exit 1; }
grep -qF ", there was a little girl named Lily" "$tmp/out_cli.txt" ||
  { echo "FAIL: the installed CLI did not produce the reference text" >&2; cat "$tmp/out_cli.txt" >&2; exit 1; }
# The model path may also come from INFOKV_MODELS_DIR.
INFOKV_MODELS_DIR="$models" "$tmp/generate_pc" >"$tmp/out_env.txt" 2>/dev/null
check_output "INFOKV_MODELS_DIR default" "$tmp/out_env.txt"

# 2. CMake consumer: find_package(infokv) + infokv::infokv.
"$cmake" -S "$src/samples/cmake_consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
  >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log" >&2; exit 1; }
"$cmake" --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log" >&2; exit 1; }
"$tmp/consumer/generate" "$model" "Once upon a time" 40 >"$tmp/out_cmake.txt" 2>"$tmp/err_cmake.txt" ||
  { cat "$tmp/err_cmake.txt" >&2; exit 1; }
check_output "CMake consumer" "$tmp/out_cmake.txt"
# The consumer must use the installed library, not the build tree's.
if command -v ldd >/dev/null 2>&1; then
  ldd "$tmp/consumer/generate" | grep infokv
fi
# 3. The Python package, where python3 looks under the prefix (no stray <prefix>/infokv/), using the installed
#    libinfokv (no copy of it in the package).
if [ -n "$python" ] && [ -d "$build/bindings/python" ]; then
  [ ! -e "$prefix/infokv" ] || { echo "FAIL: a stray $prefix/infokv/ was installed" >&2; exit 1; }
  init=$(find "$prefix/lib" -path '*-packages/infokv/__init__.py' | head -n 1)
  [ -n "$init" ] || { echo "FAIL: no Python package under $prefix/lib/*/*-packages" >&2; exit 1; }
  ! ls "$(dirname "$init")"/libinfokv.so* >/dev/null 2>&1 || { echo "FAIL: the package carries its own libinfokv" >&2; exit 1; }
  (cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$(dirname "$init")")" "$python" -c "
import infokv, sys
with infokv.Model(sys.argv[1]) as m, m.session() as s:
    print('python: Once upon a time' + s.complete('Once upon a time', 40, temperature=0).text)
print('python package at', infokv.__file__)" "$model") >"$tmp/out_py.txt" 2>&1 || { cat "$tmp/out_py.txt" >&2; exit 1; }
  check_output "installed Python package" "$tmp/out_py.txt"
fi
# 4. Go: a module outside the repository (samples/go_installed: a plain require, no replace) fetches the bindings
#    from the installed proxy tree and links the installed library through pkg-config.
if [ -d "$prefix/share/infokv/go-proxy" ] && command -v go >/dev/null 2>&1; then
  cp -r "$src/samples/go_installed" "$tmp/go_sample"
  (cd "$tmp/go_sample" && env -u LD_LIBRARY_PATH GOPROXY="file://$prefix/share/infokv/go-proxy" GOSUMDB=off \
    GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPATH="$tmp/gopath" GOCACHE="${GOCACHE:-$tmp/gocache}" CGO_ENABLED=1 \
    PKG_CONFIG_PATH="$pcdir" go run . "$model") >"$tmp/out_go.txt" 2>&1 || { cat "$tmp/out_go.txt" >&2; exit 1; }
  check_output "Go module from the installed proxy" "$tmp/out_go.txt"
  ! grep -q "^replace" "$tmp/go_sample/go.mod" || { echo "FAIL: the Go sample has a replace line" >&2; exit 1; }
fi
echo "PASS"
