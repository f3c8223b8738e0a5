#!/usr/bin/env python3
"""Checks that functions the C ABI will gain (snapshots, configs, arrays) bind through bindings/infokv.i by their
parameter names alone: SWIG wraps a synthetic header (its functions named ikv_fut_* so they never collide with real ones) that uses every convention, for Python, Java and Go, the
generated C compiles without warnings, and each function has the shape the language layers expect."""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

FUTURE_H = r"""
#include "infokv/infokv.h"
IKV_API int32_t ikv_fut_config_from_json(ikv_config **out, const char *json, size_t json_len);
IKV_API int32_t ikv_fut_config_to_binary(void *out, size_t capacity, size_t *out_len, const ikv_config *config);
IKV_API int32_t ikv_fut_config_from_binary(ikv_config **out, const void *data, size_t size);
IKV_API void ikv_fut_config_free(ikv_config *config);
IKV_API int32_t ikv_fut_session_save(const ikv_session *session, int32_t seq, const char *path);
IKV_API int32_t ikv_fut_session_restore(int32_t *out_seq, ikv_session *session, const char *path);
IKV_API int32_t ikv_fut_session_save_buffer(uint8_t *out, size_t capacity, size_t *out_len,
                                        const ikv_session *session, int32_t seq);
IKV_API int32_t ikv_fut_session_restore_buffer(int32_t *out_seq, ikv_session *session, const uint8_t *data, size_t len);
IKV_API int32_t ikv_fut_seq_kept_all(int64_t *out, size_t capacity, size_t *out_count, const ikv_session *session,
                                 int32_t seq);
IKV_API int32_t ikv_fut_config_get_double(double *out_value, const ikv_config *config, const char *key);
IKV_API int32_t ikv_fut_config_from_text(ikv_config **out, const char *text, size_t len);
IKV_API int32_t ikv_fut_restore_bytes(int32_t *out_seqs, size_t capacity, size_t *out_count, ikv_session *session,
                                      const void *bytes, size_t len);
"""

# function -> (python signature, java signature fragment, go signature fragment)
EXPECT = {
    "ikv_fut_config_from_json": ("(json)", "(long[] out, byte[] json)", "(arg1 *uintptr, arg2 string)"),
    "ikv_fut_config_to_binary": ("(out, config)", "(byte[] out, long[] out_len, SWIGTYPE_p_ikv_config config)",
                             "(arg1 []byte, arg2 *uint64, arg3 Ikv_config)"),
    "ikv_fut_config_from_binary": ("(data)", "(long[] out, byte[] data)", "(arg1 *uintptr, arg2 []byte)"),
    "ikv_fut_session_restore": ("(session, path)", "(int[] out_seq, SWIGTYPE_p_ikv_session session, String path)",
                            "(arg1 *int32, arg2 Struct_SS_ikv_session, arg3 string)"),
    "ikv_fut_session_save_buffer": ("(out, session, seq)", "(byte[] out, long[] out_len, SWIGTYPE_p_ikv_session session, int seq)",
                                "(arg1 []byte, arg2 *uint64, arg3 Struct_SS_ikv_session, arg4 int)"),
    "ikv_fut_session_restore_buffer": ("(session, data)", "(int[] out_seq, SWIGTYPE_p_ikv_session session, byte[] data)",
                                   "(arg1 *int32, arg2 Struct_SS_ikv_session, arg3 []byte)"),
    "ikv_fut_seq_kept_all": ("(out, session, seq)", "(long[] out, long[] out_count, SWIGTYPE_p_ikv_session session, int seq)",
                         "(arg1 []int64, arg2 *uint64, arg3 Struct_SS_ikv_session, arg4 int)"),
    "ikv_fut_config_get_double": ("(config, key)", "(double[] out_value, SWIGTYPE_p_ikv_config config, String key)",
                              "(arg1 *float64, arg2 Ikv_config, arg3 string)"),
    # the spellings config.h and snapshot.h use
    "ikv_fut_config_from_text": ("(text)", "(long[] out, byte[] text)", "(arg1 *uintptr, arg2 string)"),
    "ikv_fut_restore_bytes": ("(out_seqs, session, bytes)",
                              "(int[] out_seqs, long[] out_count, SWIGTYPE_p_ikv_session session, byte[] bytes)",
                              "(arg1 []int32, arg2 *uint64, arg3 Struct_SS_ikv_session, arg4 []byte)"),
}


def run(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0 or "warning" in r.stderr:
        print(" ".join(cmd), "\n", r.stdout, r.stderr, file=sys.stderr)
        raise SystemExit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--swig", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--interface", required=True)
    ap.add_argument("--capi-include", required=True)
    ap.add_argument("--python-include", action="append", default=[])
    ap.add_argument("--jni-include", action="append", default=[])
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ikv-conventions-"))
    try:
        inc = tmp / "inc" / "infokv"
        inc.mkdir(parents=True)
        for h in (pathlib.Path(a.capi_include) / "infokv").glob("*.h"):  # infokv.h includes its siblings
            shutil.copy(h, inc / h.name)
        (inc / "future.h").write_text(FUTURE_H)
        (tmp / "infokv_headers.i").write_text(
            '%{\n#include "infokv/infokv.h"\n%}\n%include "infokv/infokv.h"\n'
            '%{\n#include "infokv/future.h"\n%}\n%include "infokv/future.h"\n')
        incs = [f"-I{tmp}", f"-I{tmp / 'inc'}"]
        flags = ["-fsyntax-only", "-Wall", "-Wno-unused-parameter", "-Wno-unused-function", f"-I{tmp / 'inc'}"]
        for lang, extra in (("python", ["-python", "-threads"]),
                            ("java", ["-java", "-package", "org.infokv", "-module", "InfokvNative"]),
                            ("go", ["-go", "-cgo", "-intgosize", "64", "-package", "capi"])):
            out = tmp / lang
            out.mkdir()
            # SWIG looks in the working directory first: run it where the synthetic infokv_headers.i is
            run([a.swig] + extra + incs + ["-outdir", str(out), "-o", str(out / "wrap.c"),
                 str(pathlib.Path(a.interface).resolve())], cwd=str(tmp))
            cflags = flags + [f"-I{p}" for p in (a.python_include if lang == "python" else
                                                  a.jni_include if lang == "java" else [])]
            if lang == "go":  # the trampoline is defined by cgo's export file
                cflags.append("-Wno-strict-aliasing")
            run([a.cc] + cflags + [str(out / "wrap.c")])
        py = (tmp / "python" / "capi.py").read_text()
        java = (tmp / "java" / "InfokvNative.java").read_text()
        go = (tmp / "go" / "capi.go").read_text()
        bad = []
        for f, (p, j, g) in EXPECT.items():
            gname = f[0].upper() + f[1:]
            have_py = re.findall("def " + f + "(.*):", py)
            have_java = re.findall("public static [A-Za-z_]+ " + f + "(.*) {", java)
            have_go = re.findall("func " + gname + "([(].*?[)])", go)
            if f"def {f}{p}:" not in py:
                bad.append(f"python {f}: want {p}; have {have_py}")
            if f" {f}{j} " not in java:
                bad.append(f"java {f}: want {j}; have {have_java}")
            if f"func {gname}{g}" not in go:
                bad.append(f"go {f}: want {g}; have {have_go}")
        if bad:
            print("\n".join(bad), file=sys.stderr)
            return 1
        print(f"{len(EXPECT)} future-style functions bind by convention in Python, Java and Go")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
