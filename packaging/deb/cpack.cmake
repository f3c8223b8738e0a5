# Debian packages with CPack: `cpack -G DEB` in a build configured with -DCMAKE_INSTALL_PREFIX=/usr (and
# -DINFOKV_BUILD_BINDINGS=ON for python3-infokv and libinfokv-java). packaging/deb/check_debs.sh builds them,
# installs them with apt and runs the C, Python, Java and Go samples against them.
set(CPACK_PACKAGE_NAME infokv)
set(CPACK_PACKAGE_VENDOR "infokv")
set(CPACK_PACKAGE_CONTACT "infokv developers <dev@infokv.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Embeddable LLM inference with an InfoKV-compressed paged KV cache")
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # dpkg-shlibdeps works out libc/libstdc++/libgomp versions
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
if(INFOKV_BUILD_BINDINGS)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
if(INFOKV_BUILD_BINDINGS AND INFOKV_BINDINGS_JAVA)
  list(APPEND CPACK_COMPONENTS_ALL java)
endif()
set(_v "${PROJECT_VERSION}")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libinfokv${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "infokv runtime library (C ABI, libinfokv.so.${PROJECT_VERSION_MAJOR})")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libinfokv-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libinfokv${PROJECT_VERSION_MAJOR} (= ${_v})")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "infokv headers, pkg-config and CMake files, and the Go module (/usr/share/infokv/go-proxy)")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME infokv-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "infokv command-line tool: generate, chat, eval, tune, snapshots")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-infokv)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
# the module links only libinfokv (in libinfokv0, which dpkg-shlibdeps cannot see from here) and libc
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
# The extension is built for one CPython minor version (its ABI: the module's name carries it), so the package
# names that version; NumPy is used through its Python API only (no C ABI to match), so any python3-numpy will do.
if(INFOKV_BUILD_BINDINGS)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)  # the one bindings/ builds for (Python3_EXECUTABLE)
  set(_ikv_py "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
  math(EXPR _ikv_py_next "${Python3_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libinfokv${PROJECT_VERSION_MAJOR} (= ${_v}), libc6, python3 (>= ${_ikv_py}), \
python3 (<< ${Python3_VERSION_MAJOR}.${_ikv_py_next}), python3-numpy")
endif()
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "infokv Python package (import infokv)")
set(CPACK_DEBIAN_JAVA_PACKAGE_NAME libinfokv-java)
set(CPACK_DEBIAN_JAVA_PACKAGE_SECTION java)
# The jar bundles libinfokv.so.0 and its JNI wrapper (so that `java -cp infokv.jar` works from Maven as from this
# package) but not the system libraries they link: libinfokv0's dependencies (libflatbuffers2, libxxhash0,
# libstdc++6) are declared through it.
set(CPACK_DEBIAN_JAVA_PACKAGE_DEPENDS "libinfokv${PROJECT_VERSION_MAJOR} (= ${_v}), default-jre-headless | java11-runtime-headless")
set(CPACK_COMPONENT_JAVA_DESCRIPTION
    "infokv Java binding: /usr/share/java/infokv-${_v}.jar (carries its native libraries) and its pom")
# Debian's copyright file, one per package (/usr/share/doc/<package>/copyright)
foreach(_c runtime dev tools python java)
  string(TOUPPER ${_c} _C)
  if(_c IN_LIST CPACK_COMPONENTS_ALL)
    install(FILES ${CMAKE_CURRENT_LIST_DIR}/copyright DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${_C}_PACKAGE_NAME}
            COMPONENT ${_c})
  endif()
endforeach()
include(CPack)
