#!/usr/bin/env python3
"""infokv against llama.cpp on the same GGUF files and machine, interleaved, as ratio tables.

    python3 packaging/tools/bench_vs_llamacpp.py --infokv build/infokv --models smollm2.gguf[,q8_0.gguf,...] \
        [--work /tmp/llamacpp] [-p 256,512] [-n 128] [-t 1,2] [-r 3] [--rounds 6] [--json out.json]

llama.cpp is built from the `llama-cpp-python` source package on PyPI (`pip download --no-binary :all: --no-deps
llama-cpp-python==0.3.36`) into --work, never into this repository (about 8 minutes on 2 cores, once; later runs
reuse it). Where the CPU advertises AMX but a process may not use it (some VMs), GGML_NATIVE's build dies of SIGILL
in ggml's AMX kernels; the script notices and rebuilds llama.cpp once more with -mno-amx-* (its AVX-512/VNNI
kernels then run), and says so in the table's heading. Each round runs `llama-bench -o json` and `infokv bench -o
json` with the same options one after the other, alternating which goes first, and the tables report, per model x test x threads, the medians over rounds of
each tool's avg_ts and their ratio (infokv / llama.cpp). `--markdown` prints the table the README's speed section
is made from, headed by the date and the machine.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tarfile

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def build_llama_bench(work: str, jobs: int, no_amx: bool = False) -> str:
    build = os.path.join(work, "build-noamx" if no_amx else "build")
    exe = os.path.join(build, "bin", "llama-bench")
    if os.path.exists(exe):
        return exe
    os.makedirs(work, exist_ok=True)
    sdists = glob.glob(os.path.join(work, "llama_cpp_python-*.tar.gz"))
    if not sdists:
        run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", work, LLAMA_CPP_PYTHON])
        sdists = glob.glob(os.path.join(work, "llama_cpp_python-*.tar.gz"))
    src_root = os.path.join(work, "src")
    if not os.path.isdir(src_root):
        with tarfile.open(sdists[0]) as t:
            t.extractall(src_root)
    vendor = glob.glob(os.path.join(src_root, "*", "vendor", "llama.cpp"))[0]
    flags = [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"] if no_amx else []
    run(["cmake", "-S", vendor, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]
        + flags, stdout=subprocess.DEVNULL)
    run(["cmake", "--build", build, "-j", str(jobs), "--target", "llama-bench"], stdout=subprocess.DEVNULL)
    return exe


def dies_of_sigill(llama: str, models) -> bool:
    """True when llama-bench is killed by SIGILL on one of the models. GGML_NATIVE compiles ggml's AMX kernels
    (Q4_0/Q4_1/Q8_0/K-quant prefill) wherever the CPU advertises AMX, but some VMs advertise it without letting a
    process use the tile registers (seen on a 2-vCPU KVM Xeon: SIGILL at the first `tilezero`)."""
    for model in models:
        r = subprocess.run([llama, "-m", model, "-p", "64", "-n", "0", "-r", "1", "-t", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode == -signal.SIGILL:
            return True
    return False


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bench_rows(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    return json.loads(out)


def key(row, model):
    test = f"pp{row['n_prompt']}" if row["n_prompt"] > 0 else f"tg{row['n_gen']}"
    return (os.path.basename(model), test, int(row["n_threads"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--infokv", required=True, help="the infokv CLI")
    ap.add_argument("--models", required=True, help="comma-separated GGUF files")
    ap.add_argument("--work", default="/tmp/infokv-llamacpp", help="scratch directory for llama.cpp")
    ap.add_argument("--llama-bench", default=None, help="an existing llama-bench (skips the build)")
    ap.add_argument("-p", default="256,512")
    ap.add_argument("-n", default="128")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", default="3")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", default=None, help="write every round's rows here")
    ap.add_argument("--markdown", action="store_true", help="print the README table")
    a = ap.parse_args()
    models = a.models.split(",")
    llama = a.llama_bench or build_llama_bench(a.work, a.jobs)
    no_amx = False
    if not a.llama_bench and dies_of_sigill(llama, models):
        print("llama-bench died of SIGILL (AMX advertised but not usable here): rebuilding llama.cpp with "
              + NO_AMX, file=sys.stderr)
        llama, no_amx = build_llama_bench(a.work, a.jobs, no_amx=True), True
    common = ["-p", a.p, "-n", a.n, "-t", a.t, "-r", a.r, "-o", "json"]
    samples = {}  # (model, test, threads) -> {"infokv": [...], "llama.cpp": [...]}
    raw = []
    for rnd in range(a.rounds):
        for model in models:
            order = [("llama.cpp", [llama, "-m", model] + common), ("infokv", [a.infokv, "bench", "-m", model] + common)]
            if rnd % 2:
                order.reverse()
            for tool, cmd in order:
                for row in bench_rows(cmd):
                    samples.setdefault(key(row, model), {}).setdefault(tool, []).append(float(row["avg_ts"]))
                    raw.append({"round": rnd, "tool": tool, "model": model, **row})
            print(f"round {rnd + 1}/{a.rounds} done for {os.path.basename(model)}", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    lines = []
    if a.markdown:
        amx = f", {NO_AMX}: its AMX kernels die of SIGILL here" if no_amx else ""
        lines.append(f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} vCPUs ({cpu_name()}), "
                     f"{a.rounds} interleaved rounds, medians; llama.cpp from {LLAMA_CPP_PYTHON} (GGML_NATIVE{amx}).")
        lines.append("")
    lines.append("| model | test | threads | infokv t/s | llama.cpp t/s | ratio |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for (model, test, threads), tools in sorted(samples.items()):
        ours = statistics.median(tools.get("infokv", [float("nan")]))
        theirs = statistics.median(tools.get("llama.cpp", [float("nan")]))
        lines.append(f"| {model} | {test} | {threads} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
