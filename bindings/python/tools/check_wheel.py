#!/usr/bin/env python3
"""Builds the infokv wheel with pip (scikit-build-core driving CMake), installs it into a fresh virtual environment
and runs the stories260K greedy reference from outside the source tree.

    python3 check_wheel.py --source bindings/python --work build/wheel-check [--isolation]

Without --isolation the build backend must already be importable (pip install scikit-build-core): that is the
offline path. With --isolation pip fetches scikit-build-core and numpy from the package index.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import venv

CHECK = r"""
import json, os, sys
import infokv
d = os.path.join(os.environ["INFOKV_MODELS_DIR"], "stories260K")
ref = json.load(open(os.path.join(d, "reference.json")))["prompt_once_upon_a_time"]
assert "site-packages" in infokv.__file__, infokv.__file__
with infokv.Model(os.path.join(d, "stories260K.gguf")) as m, m.session() as s:
    c = s.complete("Once upon a time", 40, temperature=0)
assert c.tokens == ref["generated_ids_after_prompt"], c.tokens
print("wheel OK:", infokv.__file__, repr(c.text[:40]))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="bindings/python (holds pyproject.toml)")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--isolation", action="store_true", help="let pip fetch the build requirements")
    a = ap.parse_args()
    work = pathlib.Path(a.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "dist").mkdir(parents=True)
    if not a.isolation:
        try:
            import scikit_build_core  # noqa: F401
        except ImportError:
            print("scikit-build-core is not installed for", sys.executable,
                  "(pip install scikit-build-core, or pass --isolation)", file=sys.stderr)
            return 1
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(work / "dist"), a.source]
    if not a.isolation:
        cmd.insert(4, "--no-build-isolation")
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "1"))
    subprocess.run(cmd, check=True, env=env)
    wheels = list((work / "dist").glob("infokv-*.whl"))
    if len(wheels) != 1:
        print("expected one wheel, found", wheels, file=sys.stderr)
        return 1
    venv.create(work / "venv", system_site_packages=True, with_pip=True)
    py = str(work / "venv" / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--no-deps", str(wheels[0])], check=True)
    subprocess.run([py, "-c", CHECK], check=True, cwd=str(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
