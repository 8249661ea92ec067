#!/usr/bin/env python3
"""Side-by-side speed of longscope-cli and llama.cpp's llama-bench on the same GGUF files.

Not part of the build or the tests: it needs a llama-bench binary built separately, e.g. from
the llama.cpp sources inside the `llama-cpp-python` source package on PyPI:

    pip download --no-deps --no-binary :all: llama-cpp-python && tar xzf llama_cpp_python-*.tar.gz
    cmake -S llama_cpp_python-*/vendor/llama.cpp -B llama-build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
    cmake --build llama-build -j --target llama-bench

Usage:
    scripts/bench-vs-llama-cpp.py --llama-bench llama-build/bin/llama-bench \\
        --prompt 512 --new 64 --threads 2 MODEL.gguf [MODEL.gguf ...]
    # long context: prefill of 8192 tokens, decode of 64 tokens at depth 8192
    scripts/bench-vs-llama-cpp.py --llama-bench ... --prompt 8192 --depth 8192 MODEL.gguf
    # a shared machine: one busy-loop process beside both programs
    scripts/bench-vs-llama-cpp.py --llama-bench ... --busy 1 --prompt 64 --new 128 MODEL.gguf

For each model it runs, alternately and `--rounds` times, llama-bench (prompt processing of
--prompt tokens and generation of --new tokens, flash attention on) and longscope-cli bench
(prefill of --prompt tokens with memory-efficient causal attention; decode of --new tokens
after an 8-token prompt), keeps the best of each, and prints tokens/s and the ratio
longscope / llama.cpp, with longscope's prefill roofline fraction (the time its matrix
products and attention would take at the peaks of the instructions each runs on, over the
time they took). With --depth D, decode runs at
depth D instead: llama-bench `-d D` (the cache filled with D tokens first), longscope-cli
bench after a D-token prompt with memory-efficient causal attention. Both sides cache keys and
values as --kv-type (default f16, llama.cpp's default; -ctk/-ctv there, --kv-type-k/-v here).
With --paired-probe, longscope's decode runs with `bench --paired-probe` (a read of the bandwidth
probe after every decode step) and a last column gives the best over the rounds of its median
step-over-probe fraction: on a machine whose bandwidth moves within seconds, the decode set
against the bandwidth of its own moments (llama-bench has no such probe).
Machines are noisy: compare the ratios, not the absolute numbers.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def llama(bench, model, prompt, new, threads, depth, kv_type, extra=()):
    common = ["-t", str(threads), "-fa", "1", "-r", "1", "-o", "json", "-ctk", kv_type, "-ctv", kv_type] + list(extra)
    if depth == 0:
        rows = run_json([bench, "-m", model, "-p", str(prompt), "-n", str(new)] + common)
        pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == prompt and r["n_gen"] == 0)
        tg = next(r["avg_ts"] for r in rows if r["n_gen"] == new and r["n_prompt"] == 0)
        return pp, tg
    # Prefill from an empty cache; decode with the cache holding `depth` tokens.
    rows = run_json([bench, "-m", model, "-p", str(prompt), "-n", "0"] + common)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == prompt)
    rows = run_json([bench, "-m", model, "-p", "0", "-n", str(new), "-d", str(depth)] + common)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == new and r.get("n_depth", depth) == depth)
    return pp, tg


def longscope(cli, model, prompt, new, threads, depth, kv_type, paired=False):
    common = ["bench", "-m", model, "--threads", str(threads), "--kv", "static", "--json",
              "--kv-type-k", kv_type, "--kv-type-v", kv_type,
              "--ctx", str(max(prompt, max(8, depth) + new) + 1)]
    flash = ["--attn", "mem-efficient", "--causal-flash"]
    pre = run_json([cli] + common + ["--input", str(prompt), "--new", "1"] + flash)[0]
    probe = ["--paired-probe"] if paired else []
    if depth == 0:
        dec = run_json([cli] + common + ["--input", "8", "--new", str(new)] + probe)[0]
    else:
        dec = run_json([cli] + common + ["--input", str(depth), "--new", str(new)] + flash + probe)[0]
    return (pre["prefill_tok_s"], dec["decode_tok_s"], dec["bytes_per_token"], dec["bandwidth_gb_s"],
            pre.get("prefill_roofline_fraction", 0.0), dec.get("paired_roofline_fraction", 0.0))


def ratio(a, b):
    """a / b, or '-' where b is 0 (a side that measured nothing, e.g. decode with --new 1)."""
    return f"{a / b:.2f}" if b else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "app", "cli", "longscope-cli"))
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--depth", type=int, default=0, help="decode with this many tokens already in the cache "
                    "(llama-bench -d); 0: after an 8-token prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", default="f16", choices=["f32", "f16", "q8_0", "q4_0"],
                    help="the KV cache's type on both sides (default f16, llama.cpp's default)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--llama-args", default="", help="more arguments for llama-bench, e.g. \"--repack 0\" where its "
                    "AMX repacking crashes")
    ap.add_argument("--baseline-cli", help="an earlier longscope-cli, run in the same alternation: its figures "
                    "and the ratios this one / earlier are printed too (a refactor's no-regression check)")
    ap.add_argument("--paired-probe", action="store_true", help="longscope's decode against a read of the "
                    "bandwidth probe after every step (bench --paired-probe): one more column")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes running beside both programs the "
                    "whole time (a desktop sharing its cores); with --new 128 or more longscope's decode has "
                    "picked its thread count for most of its steps")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        compare(a)
    finally:
        for b in busy:
            b.kill()
            b.wait()


def compare(a):
    depth = f"at depth {a.depth}" if a.depth else "after an 8-token prompt"
    beside = f", {a.busy} busy-loop process(es) beside them" if a.busy else ""
    print(f"prompt {a.prompt} tokens, {a.new} new tokens {depth}, {a.threads} threads, "
          f"best of {a.rounds} alternating rounds{beside}")
    print("Roofline: the highest read bandwidth longscope-cli's probe saw in any round; both programs' best")
    print("decode speeds are set against it with the same bytes per token (weights streamed + KV).")
    paired_head = " longscope paired roofline |" if a.paired_probe else ""
    print("| model | prefill llama.cpp | prefill longscope | ratio | decode llama.cpp | decode longscope | ratio "
          "| bandwidth GB/s | llama.cpp roofline | longscope roofline | longscope prefill roofline |" + paired_head)
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.paired_probe else ""))
    baseline_rows = []
    for m in a.models:
        best_l = [0.0, 0.0]
        best_s = [0.0, 0.0]
        best_b = [0.0, 0.0]
        bytes_per_token, bandwidth, prefill_roof, paired = 0.0, 0.0, 0.0, 0.0
        for _ in range(a.rounds):
            pp, tg = llama(a.llama_bench, m, a.prompt, a.new, a.threads, a.depth, a.kv_type, a.llama_args.split())
            best_l = [max(best_l[0], pp), max(best_l[1], tg)]
            pre, dec, bpt, bw, proof, pf = longscope(a.cli, m, a.prompt, a.new, a.threads, a.depth, a.kv_type,
                                                     a.paired_probe)
            best_s = [max(best_s[0], pre), max(best_s[1], dec)]
            paired = max(paired, pf)
            bytes_per_token, bandwidth, prefill_roof = bpt, max(bandwidth, bw), max(prefill_roof, proof)
            if a.baseline_cli:
                pre, dec, _, bw, _, _ = longscope(a.baseline_cli, m, a.prompt, a.new, a.threads, a.depth, a.kv_type)
                best_b = [max(best_b[0], pre), max(best_b[1], dec)]
                bandwidth = max(bandwidth, bw)
        roof = bandwidth * 1e9 / bytes_per_token  # tokens/s at the roofline
        print(f"| {os.path.basename(m)} | {best_l[0]:.1f} | {best_s[0]:.1f} | {ratio(best_s[0], best_l[0])} "
              f"| {best_l[1]:.1f} | {best_s[1]:.1f} | {ratio(best_s[1], best_l[1])} | {bandwidth:.1f} "
              f"| {100 * best_l[1] / roof:.0f}% | {100 * best_s[1] / roof:.0f}% | {100 * prefill_roof:.0f}% |"
              + (f" {100 * paired:.0f}% |" if a.paired_probe else ""))
        sys.stdout.flush()
        if a.baseline_cli:
            baseline_rows.append((m, best_l, best_s, best_b))
    if baseline_rows:
        print()
        print(f"Against the earlier build {a.baseline_cli} (same rounds, alternated):")
        print("| model | prefill earlier | prefill now | now / earlier | ratio to llama.cpp earlier / now "
              "| decode earlier | decode now | now / earlier | ratio to llama.cpp earlier / now |")
        print("|---|---|---|---|---|---|---|---|---|")
        for m, l, s_, b in baseline_rows:
            print(f"| {os.path.basename(m)} | {b[0]:.1f} | {s_[0]:.1f} | {ratio(s_[0], b[0])} "
                  f"| {ratio(b[0], l[0])} / {ratio(s_[0], l[0])} | {b[1]:.1f} | {s_[1]:.1f} | {ratio(s_[1], b[1])} "
                  f"| {ratio(b[1], l[1])} / {ratio(s_[1], l[1])} |")


if __name__ == "__main__":
    main()
