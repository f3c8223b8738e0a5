#!/usr/bin/env python3
"""Runs a sample and checks both its exit status (must be 0) and its output (every --expect regex must match).

    run_sample.py --expect REGEX [--expect REGEX ...] -- command [args...]

ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status, so a sample that printed the line and then failed
would pass; this runner fails it.
"""
import argparse
import re
import subprocess
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", action="append", default=[], help="a regex the output must match (repeatable)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    if not cmd:
        ap.error("no command")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.decode("utf-8", errors="replace")
    sys.stdout.write(out)
    ok = True
    if p.returncode != 0:
        print(f"run_sample: FAILED: exit status {p.returncode}", file=sys.stderr)
        ok = False
    for rx in a.expect:
        if not re.search(rx, out, re.MULTILINE):
            print(f"run_sample: FAILED: output does not match {rx!r}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
