#!/usr/bin/env python3
"""infokv against llama.cpp (and ik_llama.cpp) on the same GGUF files and machine, interleaved, as ratio tables.

    python3 packaging/tools/bench_vs_llamacpp.py --infokv build/infokv --models smollm2.gguf[,q8_0.gguf,...] \
        [--synth llama-3.2-1b:Q4_0+Q8_0+Q4_K_M,llama-3.2-3b:Q4_0] [--ik] [--activations f32,int8] \
        [--work /tmp/llamacpp] [-p 256,512] [-n 128] [-t 1,2] [-r 3] [--rounds 6] [--json out.json] \
        [-d 3500,7000 [--policy snapkv --budget 0.25]]

`--ik` adds ik_llama.cpp as a second peer, built the same way from the `ik-llama-cpp-python` source package
(0.1.5; its `iqk` kernels take 20+ minutes to build on 2 cores, once). `--synth PRESET:TYPE+TYPE,...` makes models
at real shapes with random weights (`infokv synth --preset PRESET`, f16) and quantises them with llama.cpp's
llama-quantize into --work (the default file types people download: Q4_0, Q8_0, Q4_K_M). `--activations LIST`
runs infokv once more per listed decode arithmetic (INFOKV_CPU_ACTIVATIONS: f32, int8, int16) beside its default.

llama.cpp is built from the `llama-cpp-python` source package on PyPI (`pip download --no-binary :all: --no-deps
llama-cpp-python==0.3.36`) into --work, never into this repository (about 8 minutes on 2 cores, once; later runs
reuse it). Where the CPU advertises AMX but a process may not use it (some VMs), GGML_NATIVE's build dies of SIGILL
in ggml's AMX kernels; the script notices and rebuilds llama.cpp once more with -mno-amx-* (its AVX-512/VNNI
kernels then run), and says so in the table's heading. Each round runs `llama-bench -o json` and `infokv bench -o
json` with the same options one after the other, alternating which goes first, and the tables report, per model x test x threads, the medians over rounds of
each tool's avg_ts and their ratio (infokv / llama.cpp). `--markdown` prints the table packaging/docs/performance.md's speed section
is made from, headed by the date and the machine.

Long context: `-d D1,D2` runs every test after filling the cache with D tokens (llama-bench's and infokv bench's
-d), each depth in processes of its own, and adds each process's peak RSS (from wait4) to the table. `--policy P`
(with `--budget B`, default 0.25) runs infokv once more per depth with the cache compressed to B of the depth
before the timed test, and the table gains that run's speed and its ratio to the full cache's:

    python3 packaging/tools/bench_vs_llamacpp.py --infokv build/infokv --models smollm2.gguf -p 256 -n 32 -t 2 \
        -r 2 --rounds 2 -d 3500,7000 --policy snapkv --markdown
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
IK_LLAMA_CPP_PYTHON = "ik-llama-cpp-python==0.1.5"


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def vendored_source(work: str, package: str, vendor_dir: str, download) -> str:
    """The vendored C++ tree of a Python package's sdist in work: downloaded (download()) and unpacked once."""
    sdists = glob.glob(os.path.join(work, f"{package}-*.tar.gz"))
    if not sdists:
        download()
        sdists = glob.glob(os.path.join(work, f"{package}-*.tar.gz"))
    src_root = os.path.join(work, "src")
    if not os.path.isdir(src_root):
        with tarfile.open(sdists[0]) as t:
            t.extractall(src_root)
    return glob.glob(os.path.join(src_root, "*", "vendor", vendor_dir))[0]


def build_llama_bench(work: str, jobs: int, no_amx: bool = False) -> str:
    build = os.path.join(work, "build-noamx" if no_amx else "build")
    exe = os.path.join(build, "bin", "llama-bench")
    if os.path.exists(exe) and os.path.exists(os.path.join(build, "bin", "llama-quantize")):
        return exe
    os.makedirs(work, exist_ok=True)
    vendor = vendored_source(work, "llama_cpp_python", "llama.cpp", lambda: run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", work, LLAMA_CPP_PYTHON]))
    flags = [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"] if no_amx else []
    run(["cmake", "-S", vendor, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]
        + flags, stdout=subprocess.DEVNULL)
    run(["cmake", "--build", build, "-j", str(jobs), "--target", "llama-bench", "llama-quantize"], stdout=subprocess.DEVNULL)
    return exe


def build_ik_llama_bench(work: str, jobs: int) -> str:
    """ik_llama.cpp's llama-bench, from the ik-llama-cpp-python sdist. pip prepares that package's metadata with
    scikit-build-core, which a plain `pip download` may hang fetching; a scratch venv that has it, with build
    isolation off, downloads the sdist directly."""
    ik = os.path.join(work, "ik")
    build = os.path.join(ik, "build")
    exe = os.path.join(build, "bin", "llama-bench")
    if os.path.exists(exe):
        return exe
    os.makedirs(ik, exist_ok=True)

    def download():
        venv = os.path.join(ik, "venv")
        run([sys.executable, "-m", "venv", venv])
        pip = os.path.join(venv, "bin", "pip")
        run([pip, "install", "-q", "scikit-build-core"])
        run([pip, "download", "--no-binary", ":all:", "--no-deps", "--no-build-isolation", "-d", ik, IK_LLAMA_CPP_PYTHON])

    vendor = vendored_source(ik, "ik_llama_cpp_python", "ik_llama.cpp", download)
    # the 0.1.5 sdist leaves out the script that writes common/build-info.cpp from its template (a build step)
    gen = os.path.join(vendor, "common", "cmake", "build-info-gen-cpp.cmake")
    if not os.path.exists(gen):
        os.makedirs(os.path.dirname(gen), exist_ok=True)
        with open(gen, "w") as f:
            f.write('set(BUILD_NUMBER 0)\nset(BUILD_COMMIT "%s")\n'
                    'set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")\n'
                    'set(BUILD_TARGET "${CMAKE_SYSTEM_PROCESSOR}")\n'
                    'configure_file("${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp.in" '
                    '"${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp")\n' % IK_LLAMA_CPP_PYTHON)
    run(["cmake", "-S", vendor, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
         "-DLLAMA_CURL=OFF", "-DGGML_CUDA=OFF", "-DLLAMA_BUILD_TESTS=OFF"], stdout=subprocess.DEVNULL)
    run(["cmake", "--build", build, "-j", str(jobs), "--target", "llama-bench"], stdout=subprocess.DEVNULL)
    return exe


def synth_models(infokv: str, llama_bench: str, work: str, spec: str):
    """--synth PRESET:TYPE+TYPE,...: f16 files at the preset's shapes (infokv synth), quantised by llama-quantize."""
    quantize = os.path.join(os.path.dirname(llama_bench), "llama-quantize")
    out = []
    for item in spec.split(","):
        preset, _, types = item.partition(":")
        f16 = os.path.join(work, "models", f"{preset}-f16.gguf")
        os.makedirs(os.path.dirname(f16), exist_ok=True)
        if not os.path.exists(f16):
            run([infokv, "synth", "--preset", preset, "--out", f16], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for t in (types.split("+") if types else ["Q4_0"]):
            q = os.path.join(work, "models", f"{preset}-{t}.gguf")
            if not os.path.exists(q):
                run([quantize, f16, q, t], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out.append(q)
    return out


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


def bench_rows(cmd, env=None):
    """The JSON rows a bench prints, and the process's peak RSS in MiB."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=None if env is None else {**os.environ, **env})
    out = proc.stdout.read().decode()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return json.loads(out), usage.ru_maxrss / 1024.0


def key(row, model):
    test = f"pp{row['n_prompt']}" if row["n_prompt"] > 0 else f"tg{row['n_gen']}"
    depth = int(row.get("n_depth", 0) or 0)
    if depth > 0:
        test += f" @ d{depth}"
    return (os.path.basename(model), test, int(row["n_threads"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--infokv", required=True, help="the infokv CLI")
    ap.add_argument("--models", default="", help="comma-separated GGUF files")
    ap.add_argument("--synth", default=None, help="PRESET:TYPE+TYPE,...: synthetic models quantised by llama-quantize")
    ap.add_argument("--ik", action="store_true", help="add ik_llama.cpp (built from its PyPI source package)")
    ap.add_argument("--ik-llama-bench", default=None, help="an existing ik_llama.cpp llama-bench (implies --ik)")
    ap.add_argument("--activations", default=None, help="also run infokv with INFOKV_CPU_ACTIVATIONS set to each")
    ap.add_argument("--work", default="/tmp/infokv-llamacpp", help="scratch directory for llama.cpp")
    ap.add_argument("--llama-bench", default=None, help="an existing llama-bench (skips the build)")
    ap.add_argument("-p", default="256,512")
    ap.add_argument("-n", default="128")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", default="3")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", default=None, help="write every round's rows here")
    ap.add_argument("--markdown", action="store_true", help="print the markdown table (packaging/docs/performance.md)")
    ap.add_argument("-d", default=None, help="comma-separated depths: tokens in the cache before each test")
    ap.add_argument("--policy", default=None, help="also run infokv with this compression policy at each depth")
    ap.add_argument("--budget", default="0.25", help="the policy's budget, a fraction of the depth")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    llama = a.llama_bench or build_llama_bench(a.work, a.jobs)
    if a.synth:
        models += synth_models(a.infokv, llama, a.work, a.synth)
    if not models:
        ap.error("no models: give --models and/or --synth")
    ik = a.ik_llama_bench or (build_ik_llama_bench(a.work, a.jobs) if a.ik else None)
    modes = a.activations.split(",") if a.activations else []
    no_amx = False
    if not a.llama_bench and dies_of_sigill(llama, models):
        print("llama-bench died of SIGILL (AMX advertised but not usable here): rebuilding llama.cpp with "
              + NO_AMX, file=sys.stderr)
        llama, no_amx = build_llama_bench(a.work, a.jobs, no_amx=True), True
    if a.policy is not None and a.d is None:
        ap.error("--policy needs -d (the depth whose cache it compresses)")
    depths = [None] if a.d is None else a.d.split(",")
    common = ["-p", a.p, "-n", a.n, "-t", a.t, "-r", a.r, "-o", "json"]
    compressed = f"infokv {a.policy} {a.budget}" if a.policy else None
    samples = {}  # (model, test, threads) -> {"infokv": [...], "llama.cpp": [...], compressed: [...]}
    rss = {}  # (model, test, threads) -> {tool: [peak MiB of the process that ran it]}
    raw = []
    for rnd in range(a.rounds):
        for model in models:
            for depth in depths:
                opts = common + ([] if depth is None else ["-d", depth])
                order = [("llama.cpp", [llama, "-m", model] + opts, None),
                         ("infokv", [a.infokv, "bench", "-m", model] + opts, None)]
                if ik and depth is None:
                    order.append(("ik_llama.cpp", [ik, "-m", model] + opts, None))
                elif ik:
                    # ik_llama.cpp's llama-bench has no -d; its -gp D,N times N generated tokens after a D-token
                    # prompt (the decode test only)
                    gp = [arg for n in a.n.split(",") for arg in ("-gp", f"{depth},{n}")]
                    order.append(("ik_llama.cpp", [ik, "-m", model, "-p", "0", "-n", "0", "-t", a.t, "-r", a.r, "-o", "json"]
                                  + gp, {"IKV_GP_DEPTH": depth}))
                for mode in modes:
                    order.append((f"infokv {mode}", [a.infokv, "bench", "-m", model] + opts,
                                  {"INFOKV_CPU_ACTIVATIONS": mode}))
                if compressed:
                    order.append((compressed, [a.infokv, "bench", "-m", model] + opts
                                  + ["--policy", a.policy, "--budget", a.budget], None))
                if rnd % 2:
                    order.reverse()
                for tool, cmd, env in order:
                    rows, peak = bench_rows(cmd, env)
                    for row in rows:
                        if env and "IKV_GP_DEPTH" in env:  # an ik_llama.cpp -gp row: its prompt is the depth
                            row = {**row, "n_prompt": 0, "n_depth": int(env["IKV_GP_DEPTH"])}
                        k = key(row, model)
                        samples.setdefault(k, {}).setdefault(tool, []).append(float(row["avg_ts"]))
                        rss.setdefault(k, {}).setdefault(tool, []).append(peak)
                        raw.append({"round": rnd, "tool": tool, "model": model, "peak_rss_mib": peak, **row})
            print(f"round {rnd + 1}/{a.rounds} done for {os.path.basename(model)}", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    lines = []
    if a.markdown:
        amx = f", {NO_AMX}: its AMX kernels die of SIGILL here" if no_amx else ""
        peers = f"llama.cpp from {LLAMA_CPP_PYTHON} (GGML_NATIVE{amx})"
        if ik:
            peers += f", ik_llama.cpp from {IK_LLAMA_CPP_PYTHON} (GGML_NATIVE)"
        commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "unknown"
        lines.append(f"Measured {datetime.date.today().isoformat()} at commit {commit} on {os.cpu_count()} vCPUs "
                     f"({cpu_name()}), {a.rounds} interleaved rounds, medians; {peers}.")
        lines.append("")
    med = lambda tools, tool: statistics.median(tools.get(tool, [float("nan")]))
    if a.d is None:
        head = "| model | test | threads | infokv t/s | llama.cpp t/s | ratio |"
        rule = "|---|---|---:|---:|---:|---:|"
        if ik:
            head += " ik_llama.cpp t/s | ratio |"
            rule += "---:|---:|"
        for mode in modes:
            head += f" infokv {mode} t/s |"
            rule += "---:|"
        lines += [head, rule]
        for (model, test, threads), tools in sorted(samples.items()):
            ours, theirs = med(tools, "infokv"), med(tools, "llama.cpp")
            line = f"| {model} | {test} | {threads} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |"
            if ik:
                ikv = med(tools, "ik_llama.cpp")
                line += f" {ikv:.1f} | {ours / ikv:.2f} |"
            for mode in modes:
                line += f" {med(tools, f'infokv {mode}'):.1f} |"
            lines.append(line)
    else:
        head = "| model | test | threads | infokv t/s | llama.cpp t/s | ratio | infokv peak RSS | llama.cpp peak RSS |"
        rule = "|---|---|---:|---:|---:|---:|---:|---:|"
        if ik:
            head += " ik_llama.cpp t/s | ratio | its peak RSS |"
            rule += "---:|---:|---:|"
        if compressed:
            head += f" {compressed} t/s | vs full cache | its peak RSS |"
            rule += "---:|---:|---:|"
        lines += [head, rule]
        for k, tools in sorted(samples.items(), key=lambda kv: (kv[0][0], int(kv[0][1].split("@ d")[-1]) if "@ d" in kv[0][1] else 0, kv[0][1], kv[0][2])):
            model, test, threads = k
            ours, theirs = med(tools, "infokv"), med(tools, "llama.cpp")
            line = (f"| {model} | {test} | {threads} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} "
                    f"| {max(rss[k].get('infokv', [float('nan')])):.0f} MiB "
                    f"| {max(rss[k].get('llama.cpp', [float('nan')])):.0f} MiB |")
            if ik:
                ikv = med(tools, "ik_llama.cpp")
                line += f" {ikv:.1f} | {ours / ikv:.2f} | {max(rss[k].get('ik_llama.cpp', [float('nan')])):.0f} MiB |"
            if compressed:
                c = med(tools, compressed)
                line += f" {c:.1f} | {c / ours:.2f} | {max(rss[k].get(compressed, [float('nan')])):.0f} MiB |"
            lines.append(line)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
