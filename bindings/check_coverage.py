#!/usr/bin/env python3
"""Fails when a public C function (declared with IKV_API in capi/include/infokv/*.h) is missing from a generated
binding. SWIG silently skips what it cannot wrap, so the generated files themselves are checked, not the .i."""
import argparse
import pathlib
import re
import sys

DECL = re.compile(r"\bIKV_API\b[^;{]*?\b(ikv_[A-Za-z0-9_]+)\s*\(", re.S)


def public_functions(header_dir):
    names = set()
    for h in sorted(pathlib.Path(header_dir).glob("*.h")):
        text = re.sub(r"/\*.*?\*/", " ", h.read_text(), flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = re.sub(r"#\s*define\s+IKV_API[^\n]*", " ", text)
        names.update(DECL.findall(text))
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--headers", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--java", required=True)
    ap.add_argument("--go", required=True)
    a = ap.parse_args()
    funcs = public_functions(a.headers)
    if len(funcs) < 10:
        print(f"found only {len(funcs)} IKV_API functions in {a.headers}: the parser is broken", file=sys.stderr)
        return 1
    checks = {
        "python": (a.python, lambda f: rf"^def {f}\("),
        "java": (a.java, lambda f: rf"\bpublic static [^(]*\b{f}\("),
        "go": (a.go, lambda f: rf"^func {f[0].upper() + f[1:]}\("),
    }
    missing = []
    for lang, (path, pattern) in checks.items():
        p = pathlib.Path(path)
        if not p.exists():
            missing.append(f"{lang}: generated file {path} does not exist (build first)")
            continue
        text = p.read_text()
        for f in sorted(funcs):
            if not re.search(pattern(f), text, re.M):
                missing.append(f"{lang}: {f} is not in {path}")
    if missing:
        print("public C functions missing from the bindings (SWIG could not wrap them; add a typemap to "
              "bindings/infokv.i or follow the header's parameter-name conventions):", file=sys.stderr)
        for m in missing:
            print("  " + m, file=sys.stderr)
        return 1
    print(f"all {len(funcs)} public C functions are in the Python, Java and Go bindings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
