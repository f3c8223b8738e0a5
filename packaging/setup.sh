#!/usr/bin/env bash
# Installs what infokv needs to build and test on Debian bookworm (idempotent). Run as root (or with sudo).
# usage: bash packaging/setup.sh [EXTRA_PACKAGE...]   (other scripts name what only they need; a name ending in
#        :arm64 adds the arm64 architecture to dpkg first)
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS="cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev swig flatbuffers-compiler
libflatbuffers-dev libxxhash-dev libutf8proc-dev python3-dev python3-pytest python3-numpy python3-venv python3-pip
default-jdk-headless junit5 golang-go clang libclang-rt-14-dev libhiredis-dev redis-server libcpp-httplib-dev ccache"
missing=""
for p in $PKGS "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  case "$missing" in
    *:arm64*) dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 ;;
  esac
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
