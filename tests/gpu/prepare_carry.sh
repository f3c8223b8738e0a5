#!/usr/bin/env bash
# Prepares what tests/gpu/run.sh needs on a machine that has CUDA but none of our build dependencies and no network
# (the lent GPU machine: see src/backend/README.md, "Running the GPU check on a lent machine").
#
#   tests/gpu/prepare_carry.sh [OUT_DIR]        (default <repo>/build-carry/deps, ignored by git through /build*/)
#
# Run it HERE, on Debian bookworm with apt (no root needed): it downloads the Debian packages of FlatBuffers (flatc,
# headers, shared library, CMake config), xxHash (header, shared library), utf8proc (header, static library; the
# shared one comes along so the -dev package's link resolves) and GoogleTest (headers, static libraries, CMake
# config), unpacks them with `dpkg-deb -x` into OUT_DIR as an install prefix (OUT_DIR/usr/...), drops their
# docs, and turns symbolic links into plain files (the copy to the lent machine keeps links only as links). It also
# copies the small test data the GPU and unit tests read (stories260K and the corpora, about 6 MB) into
# OUT_DIR/data/. Everything it needs from the C/C++ runtime (libc6, libstdc++6, libgcc-s1) is on any image with a
# compiler, so it fetches none of that. run.sh picks OUT_DIR up by itself when it is <repo>/build-carry/deps, or
# through INFOKV_DEPS=OUT_DIR. Versions are Debian bookworm's: FlatBuffers 2.0.8 (flatc and headers must match),
# xxHash 0.8.1, utf8proc 2.8.0, GoogleTest 1.12.1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/build-carry/deps}
PKGS="flatbuffers-compiler flatbuffers-compiler-dev libflatbuffers-dev libflatbuffers2 libxxhash-dev libxxhash0 libutf8proc-dev libutf8proc2 libgtest-dev"
MODELS=${INFOKV_MODELS_DIR:-$ROOT/../shared/models}
CORPORA=${INFOKV_CORPORA_DIR:-$ROOT/../shared/corpora}

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || { echo "needs apt-get and dpkg-deb (Debian/Ubuntu)"; exit 1; }
[ "$(dpkg --print-architecture)" = amd64 ] || { echo "the lent machine is x86-64: run this on an amd64 Debian"; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DEBS=$(mktemp -d)
trap 'rm -rf "$DEBS"' EXIT

echo "== downloading: $PKGS"
# apt-get download writes into the current folder; the _apt sandbox user may not write a mktemp folder, hence -o.
(cd "$DEBS" && apt-get -q -o APT::Sandbox::User=root download $PKGS >/dev/null) \
  || { echo "apt-get download failed (run 'apt-get update' first?)"; exit 1; }
for d in "$DEBS"/*.deb; do
  printf '  %-60s %s\n' "$(basename "$d")" "$(du -h "$d" | cut -f1)"
  dpkg-deb -x "$d" "$OUT"
done

# Only what a build and its run need: no docs, man pages, lintian overrides or sources.
rm -rf "$OUT/usr/share" "$OUT/usr/src"
# Links become the files they point to (all are relative links between files of the same folder).
find "$OUT" -type l | while read -r l; do
  t=$(readlink -f "$l")
  [ -f "$t" ] || { echo "dangling link $l -> $(readlink "$l")"; exit 1; }
  cp --remove-destination "$t" "$l"
done

L=$OUT/usr/lib/x86_64-linux-gnu
for f in usr/bin/flatc usr/include/flatbuffers/flatbuffers.h usr/include/xxhash.h usr/include/gtest/gtest.h \
         "$L/libflatbuffers.so" "$L/libflatbuffers.so.2" "$L/libxxhash.so" "$L/libxxhash.so.0" "$L/libgtest.a" \
         "$L/libgtest_main.a" usr/include/utf8proc.h "$L/libutf8proc.a" "$L/cmake/flatbuffers/FlatBuffersConfig.cmake" "$L/cmake/GTest/GTestConfig.cmake"; do
  case $f in /*) p=$f ;; *) p=$OUT/$f ;; esac
  [ -f "$p" ] || { echo "missing after unpacking: $p"; exit 1; }
done
echo "flatc: $(LD_LIBRARY_PATH=$L "$OUT/usr/bin/flatc" --version)"

echo "== test data"
mkdir -p "$OUT/data/models" "$OUT/data/corpora"
if [ -f "$MODELS/stories260K/stories260K.gguf" ]; then
  cp -r "$MODELS/stories260K" "$OUT/data/models/"
  echo "  models: stories260K (from $MODELS)"
else
  echo "  WARNING: $MODELS/stories260K missing: the GPU forward tests will skip, unit tests that need it fail"
fi
if [ -d "$CORPORA" ]; then
  cp "$CORPORA"/*.txt "$OUT/data/corpora/"
  echo "  corpora: $(ls "$OUT/data/corpora" | wc -l) files (from $CORPORA)"
else
  echo "  WARNING: $CORPORA missing: unit tests that read the corpora fail"
fi
echo "  (SmolLM2-135M, ~94 MiB, does not fit the carry: run.sh leaves out the unit tests that need it when it is absent)"

echo "== $OUT"
du -sh "$OUT"/usr/bin "$OUT"/usr/include "$L" "$OUT/data" | sed 's/^/  /'
TOTAL=$(du -sm "$OUT" | cut -f1)
echo "total: $(du -sh "$OUT" | cut -f1) (the carry limit is 64 MiB for everything that travels)"
[ "$TOTAL" -lt 48 ] || { echo "WARNING: over 48 MiB: little room is left under the 64 MiB carry limit"; }
echo "next: the run tool with command 'bash tests/gpu/run.sh' and carry [\"$(realpath --relative-to="$ROOT" "$(dirname "$OUT")" 2>/dev/null || dirname "$OUT")\"]"
