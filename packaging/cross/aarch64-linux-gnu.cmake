# Cross-compiling infokv for 64-bit ARM Linux (Jetson-class boards, Graviton, Raspberry Pi 4/5) from an x86-64
# Debian machine, with Debian's cross toolchain and the arm64 builds of the dependencies (multiarch):
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
#     libflatbuffers-dev:arm64 libxxhash-dev:arm64 libhiredis-dev:arm64 libutf8proc-dev:arm64 \
#     libcpp-httplib-dev:arm64 libgtest-dev:arm64
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=packaging/cross/aarch64-linux-gnu.cmake
# The test programs then run here under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR below): ctest works as usual.
# packaging/cross/test_arm64.sh does all of it. flatc is the build machine's own (it generates sources only).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Debian's multiarch layout: arm64 libraries under /usr/lib/aarch64-linux-gnu, headers shared in /usr/include.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# The emulator finds the arm64 loader and libraries where multiarch put them (/lib/ld-linux-aarch64.so.1, from
# libc6:arm64, which the :arm64 packages above pull in). Not `-L /usr/aarch64-linux-gnu`: with the cross
# toolchain's own older libc there, qemu-user 7.2 hangs in the first pthread_create (measured on bookworm).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# GCC's note that std::pair<double, double> is passed differently since GCC 10.1 (-Wpsabi) is about mixing objects
# built by GCC < 10 with newer ones; everything here is built by one compiler.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")
