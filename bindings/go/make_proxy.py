#!/usr/bin/env python3
"""Writes the Go module bindings/go as a module proxy tree (the GOPROXY protocol, served from files):

    <out>/github.com/infokv/infokv/bindings/go/@v/{list, vX.Y.Z.info, vX.Y.Z.mod, vX.Y.Z.zip}

`cmake --install` puts it under <prefix>/share/infokv/go-proxy, so a program outside this repository builds against
the installed library with a plain `require` and no `replace`:

    GOPROXY=file://<prefix>/share/infokv/go-proxy GOSUMDB=off go get github.com/infokv/infokv/bindings/go@v0.1.0

usage: make_proxy.py MODULE_DIR VERSION OUT_DIR
"""
import json
import os
import pathlib
import sys
import zipfile

# What a module zip may hold: the module's sources (the committed SWIG output included); not build helpers.
KEEP = (".go", ".c", ".h")


def main() -> int:
    src, version, out = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    version = version if version.startswith("v") else "v" + version
    gomod = (src / "go.mod").read_text()
    module = gomod.split("\n", 1)[0].split()[1]
    at = out / module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    prefix = f"{module}@{version}/"
    zpath = at / f"{version}.zip"
    tmp = zpath.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo(prefix + "go.mod", (1980, 1, 1, 0, 0, 0)), gomod)
        for p in sorted(src.rglob("*")):
            rel = p.relative_to(src).as_posix()
            if p.is_file() and p.suffix in KEEP and not rel.startswith("testdata/"):
                info = zipfile.ZipInfo(prefix + rel, (1980, 1, 1, 0, 0, 0))  # fixed times: the same bytes every build
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, p.read_bytes())
    os.replace(tmp, zpath)
    (at / f"{version}.mod").write_text(gomod)
    (at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": "2026-01-01T00:00:00Z"}) + "\n")
    (at / "list").write_text(version + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
