#!/usr/bin/env bash
# Builds the Debian packages (libinfokv0, libinfokv-dev, infokv-tools, python3-infokv, libinfokv-java) with CPack,
# installs them with apt, and runs the C, Python, Java (also through Maven) and Go samples and the CLI against the
# installed packages only: no build tree on any path. Removes the packages again at the end (so CI leaves the
# machine as it found it). Needs root (apt) and ../shared (INFOKV_MODELS_DIR).
# usage: bash packaging/deb/check_debs.sh BUILD_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-$ROOT/build-ci/deb}"
JOBS="${JOBS:-$(nproc)}"
MODELS="${INFOKV_MODELS_DIR:-$ROOT/../shared/models}"
MODEL="$MODELS/stories260K/stories260K.gguf"
EXPECT="Once upon a time, there was a little girl named Lily"
[ -f "$MODEL" ] || { echo "check_debs: missing $MODEL" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "check_debs: needs root (apt install)" >&2; exit 1; }
# Maven's plugins from Debian's maven-repo (offline): install:install-file, resources and compiler
bash "$ROOT/packaging/setup.sh" maven libmaven-install-plugin-java libmaven-compiler-plugin-java \
  libmaven-resources-plugin-java abigail-tools

echo "=== configure and build $BUILD (prefix /usr)"
# -g: the ABI check reads the library's debug info (types of the public structs); the packages are stripped.
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_C_FLAGS=-g -DCMAKE_CXX_FLAGS=-g -DCPACK_STRIP_FILES=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DINFOKV_WITH_CUDA=OFF -DINFOKV_BUILD_TESTS=OFF \
  -DINFOKV_BUILD_BINDINGS=ON -DINFOKV_BINDINGS_GO=ON -DINFOKV_BINDINGS_JAVA=ON >/dev/null
cmake --build "$BUILD" -j "$JOBS" >/dev/null
echo "=== ABI of libinfokv.so against the committed baseline (abidiff)"
bash "$ROOT/packaging/abi/check_abi.sh" "$(readlink -f "$BUILD/libinfokv.so")"
rm -f "$BUILD"/*.deb
(cd "$BUILD" && cpack -G DEB >/dev/null)
debs=("$BUILD"/libinfokv0_*.deb "$BUILD"/libinfokv-dev_*.deb "$BUILD"/infokv-tools_*.deb "$BUILD"/python3-infokv_*.deb
      "$BUILD"/libinfokv-java_*.deb)
for d in "${debs[@]}"; do [ -f "$d" ] || { echo "check_debs: $d was not made" >&2; exit 1; }; done
names="libinfokv0 libinfokv-dev infokv-tools python3-infokv libinfokv-java"
for d in "${debs[@]}"; do dpkg-deb -f "$d" Package Version Depends | tr '\n' ' '; echo; done
# what each package declares and carries: a copyright file; python3-infokv names the CPython it was built for;
# libinfokv-java depends on libinfokv0 (the bundled library's system dependencies come through it), and the JNI
# library in its jar has no build-tree RUNPATH
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
dpkg-deb -f "$BUILD"/python3-infokv_*.deb Depends | grep -qF "python3 (>= $pyver)" \
  || { echo "FAIL: python3-infokv does not depend on python3 (>= $pyver)" >&2; exit 1; }
dpkg-deb -f "$BUILD"/libinfokv-java_*.deb Depends | grep -q "libinfokv0 (= " \
  || { echo "FAIL: libinfokv-java does not depend on libinfokv0" >&2; exit 1; }
for d in "${debs[@]}"; do
  pkg=$(dpkg-deb -f "$d" Package)
  listing=$(dpkg-deb -c "$d")  # not piped into grep -q: an early exit would break dpkg-deb's pipe (pipefail)
  grep -qF "./usr/share/doc/$pkg/copyright" <<<"$listing" || { echo "FAIL: $pkg has no copyright file" >&2; exit 1; }
done
jdir=$(mktemp -d)
(cd "$jdir" && dpkg-deb -x "$(ls "$BUILD"/libinfokv-java_*.deb)" . && unzip -q -o usr/share/java/infokv-*.jar 'org/infokv/native/*')
for so in "$jdir"/org/infokv/native/*/*.so*; do
  rp=$(readelf -d "$so" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  case "$rp" in ""|'$ORIGIN') ;; *) echo "FAIL: $(basename "$so") in the jar has RUNPATH '$rp'" >&2; exit 1 ;; esac
done
rm -rf "$jdir"
echo "ok: package dependencies, copyright files, the jar's RUNPATHs"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/infokv-debs.XXXXXX")
cleanup() {
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $names >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
echo "=== apt install the packages"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null

check() {  # label, output file, expected text
  grep -qF "$3" "$2" || { echo "FAIL: $1 output lacks '$3':" >&2; cat "$2" >&2; exit 1; }
  echo "ok: $1"
}
cd "$tmp"
unset LD_LIBRARY_PATH PYTHONPATH PKG_CONFIG_PATH CLASSPATH

# C: the system pkg-config file, the system library (no rpath needed under /usr). Its variables name the real
# folders (a multiarch libdir once gave prefix=/usr/lib and includedir=/usr/lib/include).
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
for v in "prefix=/usr" "includedir=/usr/include" "libdir=/usr/lib/$multiarch"; do
  got=$(pkg-config --variable="${v%%=*}" infokv)
  # pkg-config prints the path as computed (/usr/lib/x86_64-linux-gnu/pkgconfig/../../..); compare real paths
  [ "$(realpath -m "$got")" = "${v#*=}" ] || { echo "FAIL: infokv.pc ${v%%=*} is '$got', want ${v#*=}" >&2; exit 1; }
done
[ -f "$(pkg-config --variable=includedir infokv)/infokv/infokv.h" ] || { echo "FAIL: includedir lacks infokv/infokv.h" >&2; exit 1; }
echo "ok: infokv.pc variables (prefix, includedir, libdir)"
cc -std=c99 -Wall -Wextra -pedantic -Werror "$ROOT/samples/c/generate.c" $(pkg-config --cflags --libs infokv) -o c_sample
./c_sample "$MODEL" "Once upon a time" 40 >c.txt 2>/dev/null
check "C sample against libinfokv-dev" c.txt "$EXPECT"
ldd ./c_sample >ldd.txt; grep -Eq "libinfokv.so.0 => /(usr/)?lib/" ldd.txt || { echo "FAIL: C sample not linked to /usr/lib" >&2; exit 1; }

# the CLI from infokv-tools
/usr/bin/infokv generate --model "$MODEL" --prompt "Once upon a time" --max-tokens 40 --temperature 0 >cli.txt 2>/dev/null
check "infokv CLI from infokv-tools" cli.txt ", there was a little girl named Lily"

# Python from python3-infokv
/usr/bin/python3 "$ROOT/bindings/tests/run_sample.py" --expect "continuation matches the uninterrupted session" -- \
  /usr/bin/python3 "$ROOT/samples/python/generate_compressed.py" "$MODEL" >py.txt 2>&1 || { cat py.txt >&2; exit 1; }
/usr/bin/python3 -c "import infokv, sys; assert infokv.__file__.startswith('/usr/lib/python3/dist-packages/'), infokv.__file__"
check "Python sample against python3-infokv" py.txt "continuation matches"

# Java from libinfokv-java: straight from the jar, and through Maven (install:install-file, then a Maven build)
jar=$(ls /usr/share/java/infokv-*.jar)
java -cp "$jar" --source 11 "$ROOT/samples/java/GenerateCompressed.java" "$MODEL" >java.txt 2>&1 || { cat java.txt >&2; exit 1; }
check "Java sample against libinfokv-java" java.txt "continuation matches"
cat >settings.xml <<'XML'
<settings><mirrors><mirror><id>debian</id><mirrorOf>*</mirrorOf><url>file:///usr/share/maven-repo</url></mirror></mirrors></settings>
XML
mvn -q -s settings.xml -Dmaven.repo.local="$tmp/m2" org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file \
  -Dfile="$jar" -DpomFile="${jar%.jar}.pom" >mvn.txt 2>&1 || { cat mvn.txt >&2; exit 1; }
cp -r "$ROOT/samples/java_maven" maven_sample
(cd maven_sample && mvn -q -s ../settings.xml -Dmaven.repo.local="$tmp/m2" compile) >mvn.txt 2>&1 || { cat mvn.txt >&2; exit 1; }
java -cp "maven_sample/target/classes:$(ls "$tmp"/m2/org/infokv/infokv/*/infokv-*.jar)" example.Generate "$MODEL" >mvn_run.txt 2>&1 ||
  { cat mvn_run.txt >&2; exit 1; }
check "Maven sample against the jar installed with mvn install:install-file" mvn_run.txt "$EXPECT"

# Go: the module from /usr/share/infokv/go-proxy (libinfokv-dev), no replace line
if command -v go >/dev/null 2>&1; then
  cp -r "$ROOT/samples/go_installed" go_sample
  (cd go_sample && GOPROXY=file:///usr/share/infokv/go-proxy GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local \
     GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" CGO_ENABLED=1 go run . "$MODEL") >go.txt 2>&1 || { cat go.txt >&2; exit 1; }
  check "Go module from libinfokv-dev's proxy tree" go.txt "$EXPECT"
fi
echo "=== Debian packages: all samples passed against the installed packages"
