#!/usr/bin/env python3
"""CPU campaign: KokkosMLA's OpenMP (or Serial) benchmark against PyTorch's
CPU path, fp32, at each thread count, and the thread-scaling plot.

For every count n of --threads, the benchmark runs with OMP_NUM_THREADS=n
(threads spread over the cores) on the prefill shapes (4,1024,16,64,256) and
(1,4096,16,128,512) (Auto) and on the decode shape B=32, Tq=1, H=16,
S=4096, latent 512 + RoPE 64, page 64; then PyTorch with
torch.set_num_threads(n) on the same problems: decompress +
scaled_dot_product_attention for prefill, the absorbed decode of
compare_decode.py, after one untimed pass of ours. All of ours run first: PyTorch's CPU threads keep
spinning after its runs and slow a benchmark started after them. Rows carry
`threads`; the plot shows time against threads, ours and PyTorch's.

OpenBLAS picks its kernels from the CPU's identification; a virtual machine
that hides the model (seen: "Intel(R) Xeon(R) Processor" with AMX, read as
"Prescott", OPENBLAS_VERBOSE=2) gets its slowest GEMMs: --blas-coretype
(e.g. SAPPHIRERAPIDS) names the core for our runs, recorded in the rows.

  python3 perf_tests/compare_cpu.py --bench build-omp/perf_tests/kokkosmla_perf_tests \\
      --threads 1,2,4,8,16 --out cpu.jsonl --plot docs/cpu_threads.png [--blas-coretype SAPPHIRERAPIDS]
"""
import argparse, json, os, re, subprocess, time, types

import compare_decode
from compare_torch import benchmark_medians, decompressed_flops, run_torch

PREFILL = [(4, 1024, 16, 64, 256), (1, 4096, 16, 128, 512)]
DECODE = [(32, 1, 16, 4096)]


def bench_filter():
    prefill = "|".join("B%d_T%d_H%d_D%d_R%d" % s for s in PREFILL)
    decode = "|".join(compare_decode.name(*s) for s in DECODE)
    return "^float/(%s)/Auto/|^decode/float/(%s)/" % (prefill, decode)


def run_ours(args, threads):
    os.environ.update(OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread", OMP_PLACES="threads")
    if args.blas_coretype:
        os.environ["OPENBLAS_CORETYPE"] = args.blas_coretype
    medians, context = benchmark_medians(args.bench, args.repetitions, bench_filter())
    rows = []
    for b in medians:
        parts = b["run_name"].split("/")  # decode/float/<shape>/... or float/<shape>/Auto/...
        kind, shape = parts[0], parts[2] if parts[0] == "decode" else parts[1]
        ms = b["real_time"]
        if kind == "decode":
            B, Tq, H, S = (int(x) for x in re.findall(r"\d+", shape)[:4])
            r = compare_decode.row(B, Tq, H, S, "kokkosmla-cache", args.backend, ms, b.get("relerr"))
        else:
            B, T, H, D, R = (int(x) for x in re.findall(r"\d+", shape))
            r = dict(shape=[B, T, H, D, R], dtype="float32", impl="kokkosmla-auto", backend=args.backend,
                     ms=round(ms, 5), relerr=b.get("relerr"),
                     tflops=round(decompressed_flops(B, T, H, D, R) / ms / 1e9, 3))
        r.update(plan=b.get("label", ""), threads=threads, commit=context.get("git_hash"), device="cpu",
                 blas_coretype=args.blas_coretype or "detected")
        rows.append(r)
        print(json.dumps(r), flush=True)
    return rows


def run_torch_decode(threads, runs):
    import torch
    torch.set_num_threads(threads)
    rows = []
    for (B, Tq, H, S) in DECODE:
        args = compare_decode.torch_decode_inputs(torch, B, Tq, H, S, "float32", "cpu")
        err = compare_decode.torch_decode_error(torch, args)
        compare_decode.torch_decode(torch, *args)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            compare_decode.torch_decode(torch, *args)
            times.append(time.perf_counter() - t)
        ms = sorted(times)[len(times) // 2] * 1e3
        rows.append(compare_decode.row(B, Tq, H, S, "torch-absorbed-decode", "torch-cpu", ms, err))
    return rows


def run_torch_all(args, threads):
    targs = types.SimpleNamespace(torch_device="cpu", threads=threads, cpu_runs=args.cpu_runs, dtype="float32")
    rows = run_torch(targs, PREFILL)[0] + run_torch_decode(threads, args.cpu_runs)
    for r in rows:
        r.update(threads=threads, device="cpu")
        print(json.dumps(r), flush=True)
    return rows


def key(r):
    return (tuple(r["shape"]), r.get("Tq"), r.get("S"))


def label(k):
    shape, tq, s = k
    if tq is None:
        return "prefill (%d,%d,%d,%d,%d)" % shape
    return "decode B=%d Tq=%d H=%d S=%d" % (shape[0], tq, shape[2], s)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    problems = sorted({key(r) for r in rows}, key=lambda k: (k[1] is not None, k))
    fig, axes = plt.subplots(1, len(problems), figsize=(5 * len(problems), 4))
    for ax, k in zip(axes, problems):
        for backend, name in (("torch-cpu", "PyTorch"), (None, "KokkosMLA")):
            pts = sorted((r["threads"], r["ms"]) for r in rows
                         if key(r) == k and (r["backend"] == backend or (backend is None and r["backend"] != "torch-cpu")))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("threads")
        ax.set_ylabel("ms (median)")
        ax.set_title(label(k), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("fp32 on the CPU: KokkosMLA (OpenMP) against PyTorch, same threads")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--backend", default="openmp")
    p.add_argument("--threads", default="1,2,4,8,16")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--cpu-runs", type=int, default=5)
    p.add_argument("--out", required=True)
    p.add_argument("--plot", default="")
    p.add_argument("--blas-coretype", default="",
                   help="OPENBLAS_CORETYPE for our runs, where OpenBLAS misreads a virtual CPU")
    args = p.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    # One untimed pass first: the first benchmark of a cold machine ran up to
    # 1.5x slower than the same one after it (page mapping, clocks).
    os.environ["OMP_NUM_THREADS"] = str(max(counts))
    benchmark_medians(args.bench, 1, bench_filter())
    ours = [r for n in counts for r in run_ours(args, n)]
    torch_rows = [r for n in counts for r in run_torch_all(args, n)]
    with open(args.out, "w") as f:
        for r in ours + torch_rows:
            f.write(json.dumps(r) + "\n")
    base = {(key(r), r["threads"]): r["ms"] for r in torch_rows}
    for r in ours:
        print("%-40s %2d threads %10.3f ms  torch %10.3f ms  %.2fx  relerr %s" % (
            label(key(r)), r["threads"], r["ms"], base[(key(r), r["threads"])],
            base[(key(r), r["threads"])] / r["ms"], r["relerr"]))
    if args.plot:
        plot(ours + torch_rows, args.plot)


if __name__ == "__main__":
    main()
