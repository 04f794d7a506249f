#!/usr/bin/env python3
"""Runs the KokkosMLA benchmark and the PyTorch baseline back to back on one
machine and writes one JSON object per line: shape [B,T,H,D,R], dtype, impl,
backend, ms (median), relerr (against float64), device, plus achieved TFLOP/s.

PyTorch baseline (TF32 off), in the same dtype as ours: K and V decompressed
with einsum, then scaled_dot_product_attention(is_causal=True) (FlashAttention
or cuDNN for bf16/fp16); timed with triton's do_bench (median) on the GPU, or
the median of repeated wall-clock runs on the CPU. Both sides fill the inputs
with the same hash values (unit_tests/HashFill.hpp), so relerr (against a
float64 computation on the same rounded inputs) compares like with like.

  compare_torch.py --bench build/perf_tests/kokkosmla_perf_tests --backend cuda --out perf_tests/results/h200.jsonl
  compare_torch.py --bench build-omp/perf_tests/kokkosmla_perf_tests --backend openmp --torch-device cpu \
      --filter 'B4_T1024|B1_T4096_H16' --append --out perf_tests/results/h200.jsonl
  compare_torch.py --bench build/perf_tests/kokkosmla_perf_tests --backend cuda --dtype bfloat16 \
      --algorithms Auto --filter 'B1_T4096' --append --out perf_tests/results/h200.jsonl
"""
import argparse, json, math, re, subprocess, sys, time

SHAPES = [(2, 32, 4, 16, 24), (4, 1024, 16, 64, 256), (1, 4096, 16, 128, 512), (1, 4096, 128, 128, 512),
          (1, 1024, 16, 128, 512), (1, 2048, 16, 128, 512), (1, 8192, 16, 128, 512),
          (1, 16384, 16, 128, 512), (1, 32768, 16, 128, 512)]


# Benchmark name prefix of each dtype in kokkosmla_perf_tests.
BENCH_TYPE = {"float32": "float", "tf32": "tf32", "fp32emu": "fp32emu", "bfloat16": "bf16", "float16": "fp16"}
# PyTorch's side of each: tf32 and fp32emu (ours, opt-in: TF32 and 3xTF32
# products) are compared with fp32, TF32 off.
TORCH_TYPE = {"float32": "float32", "tf32": "float32", "fp32emu": "float32", "bfloat16": "bfloat16",
              "float16": "float16"}


def hash_fill(torch, n, seed, scale, device):
    """unit_tests/HashFill.hpp's values in float64: a splitmix-style hash of the
    index, with uint64 arithmetic done in int64 (wrapping; logical shifts masked)."""
    def shr(x, k):
        return (x >> k) & ((1 << (64 - k)) - 1)
    def wrap(c):
        return c - (1 << 64) if c >= (1 << 63) else c
    x = (torch.arange(n, dtype=torch.int64, device=device) + 1) * wrap(0x9E3779B97F4A7C15)
    x = x ^ wrap(seed << 32)
    x = x ^ shr(x, 31)
    x = x * wrap(0xBF58476D1CE4E5B9)
    x = x ^ shr(x, 29)
    return scale * (shr(x, 11).double() * (2.0 / 9007199254740992.0) - 1.0)


def hash_value(i, seed, scale):
    """One value of hash_fill in plain integers, to check the tensor version."""
    m = (1 << 64) - 1
    x = ((i + 1) * 0x9E3779B97F4A7C15 & m) ^ (seed << 32)
    x ^= x >> 31
    x = x * 0xBF58476D1CE4E5B9 & m
    x ^= x >> 29
    return scale * ((x >> 11) * (2.0 / 9007199254740992.0) - 1.0)


def decompressed_flops(B, T, H, D, R):
    return 4 * B * T * R * H * D + 2 * B * T * T * H * D


def benchmark_medians(bench, repetitions, bench_filter):
    """Runs the Google Benchmark binary; returns its median rows and its context."""
    cmd = [bench, "--benchmark_format=json", "--benchmark_repetitions=%d" % repetitions,
           "--benchmark_report_aggregates_only=true", "--benchmark_filter=" + bench_filter]
    print("+", " ".join(cmd), flush=True)
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return [b for b in res["benchmarks"] if b.get("aggregate_name") == "median"], res.get("context", {})


def team_scratch(args, context):
    """Level-0 team scratch of the benchmark's Kokkos: its context, else --team-scratch."""
    value = context.get("team_scratch") or args.team_scratch
    return int(value) if value else None


def run_ours(args):
    medians, context = benchmark_medians(args.bench, args.repetitions, args.bench_filter)
    rows = []
    for b in medians:
        _, shape, alg = b["run_name"].split("/")[:3]
        B, T, H, D, R = (int(x) for x in re.findall(r"\d+", shape))
        ms = b["real_time"]  # unit: ms
        rows.append(dict(shape=[B, T, H, D, R], dtype=args.dtype, impl="kokkosmla-" + alg.lower(),
                         chosen=b.get("label", ""), backend=args.backend, ms=round(ms, 5),
                         relerr=b.get("relerr"), tflops=round(decompressed_flops(B, T, H, D, R) / ms / 1e9, 3),
                         workspace_mb=b.get("workspace_MB"), inputs_mb=b.get("inputs_MB"),
                         commit=context.get("git_hash"), team_scratch=team_scratch(args, context)))
    return rows, context


def run_torch(args, shapes):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = args.torch_device
    if dev == "cpu":
        torch.set_num_threads(args.threads)

    dtype = getattr(torch, TORCH_TYPE[args.dtype])
    assert hash_fill(torch, 64, 3, 0.5, dev).tolist() == [hash_value(i, 3, 0.5) for i in range(64)]

    def make(B, T, H, D, R):
        # The benchmark's fills: q seed 1, latent 2, w_uk 3, w_uv 4 (perf_tests/main.cpp).
        fill = lambda shape, seed, scale: hash_fill(torch, math.prod(shape), seed, scale, dev).view(shape).to(dtype)
        return (fill((B, T, H, D), 1, 1.0), fill((B, T, R), 2, 1.0), fill((R, H, D), 3, 1 / math.sqrt(R)),
                fill((R, H, D), 4, 1 / math.sqrt(R)))

    def decompress_sdpa(q, lat, wk, wv):
        k = torch.einsum("btr,rhd->bhtd", lat, wk)
        v = torch.einsum("btr,rhd->bhtd", lat, wv)
        return F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=True).transpose(1, 2)

    def median_ms(fn):
        if dev == "cuda":
            import triton.testing as tt
            return tt.do_bench(fn, warmup=50, rep=300, return_mode="median")
        fn()
        times = []
        for _ in range(args.cpu_runs):
            t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2] * 1e3

    rows = []
    for (B, T, H, D, R) in shapes:
        q, lat, wk, wv = make(B, T, H, D, R)
        err = None
        if T <= 8192:
            out = decompress_sdpa(q, lat, wk, wv)
            ref = decompress_sdpa(q.double(), lat.double(), wk.double(), wv.double())
            err = float((out.double() - ref).norm() / ref.norm())
            del out, ref
        if dev == "cuda":
            torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        ms = median_ms(lambda: decompress_sdpa(q, lat, wk, wv))
        row = dict(shape=[B, T, H, D, R], dtype=TORCH_TYPE[args.dtype], impl="torch-decompress-sdpa",
                   backend="torch-cuda" if dev == "cuda" else "torch-cpu", ms=round(ms, 5), relerr=err,
                   tflops=round(decompressed_flops(B, T, H, D, R) / ms / 1e9, 3))
        if dev == "cuda":
            row["peak_mb"] = round(torch.cuda.max_memory_allocated() / 1e6, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, lat, wk, wv
    ceilings = {}
    if dev == "cuda":
        import triton.testing as tt
        x = torch.empty(2 * 1024**3 // 4, device=dev); y = torch.empty_like(x)
        ms = tt.do_bench(lambda: y.copy_(x), return_mode="median")
        ceilings["copy_GBps"] = round(2 * x.numel() * 4 / ms / 1e6, 1)
        del x, y
        a = torch.randn(8192, 8192, device=dev); b = torch.randn(8192, 8192, device=dev)
        ms = tt.do_bench(lambda: a @ b, return_mode="median")
        ceilings["sgemm_TFLOPs"] = round(2 * 8192**3 / ms / 1e9, 1)
        ceilings["gpu"] = torch.cuda.get_device_name()
    return rows, ceilings


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--backend", required=True, help="cuda or openmp")
    p.add_argument("--torch-device", default="cuda")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--cpu-runs", type=int, default=5)
    p.add_argument("--filter", default="", help="regex on B..._T..._H..._D..._R... names")
    p.add_argument("--algorithms", default="Auto|Fused|Decompressed|Absorbed")
    p.add_argument("--dtype", default="float32", choices=sorted(BENCH_TYPE))
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--device", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--append", action="store_true")
    p.add_argument("--team-scratch", type=int, default=0,
                   help="team scratch bytes to record when the benchmark does not report them")
    args = p.parse_args()
    name = lambda s: "B%d_T%d_H%d_D%d_R%d" % s
    shapes = [s for s in SHAPES if re.search(args.filter, name(s))]
    args.bench_filter = "^%s/(%s)/(%s)/" % (BENCH_TYPE[args.dtype], "|".join(name(s) for s in shapes),
                                           args.algorithms)
    # Ours first: PyTorch's CPU thread pool keeps spinning after its runs and
    # would compete with the benchmark's OpenMP threads (8-10x slower).
    ours, context = run_ours(args)
    torch_rows, ceilings = run_torch(args, shapes)
    device = args.device or ceilings.pop("gpu", "cpu")
    with open(args.out, "a" if args.append else "w") as f:
        for r in torch_rows + ours:
            r["device"] = device
            f.write(json.dumps(r) + "\n")
        if ceilings:
            f.write(json.dumps(dict(impl="ceilings", backend="torch-cuda", device=device, **ceilings)) + "\n")
    print(json.dumps(dict(ceilings=ceilings, kokkos=context.get("kokkos_version"),
                          space=context.get("kokkos_execution_space"), git=context.get("git_hash"))))
    byshape = {}
    for r in torch_rows + ours:
        byshape.setdefault(tuple(r["shape"]), []).append(r)
    for s, rows in byshape.items():
        base = next((r["ms"] for r in rows if r["impl"].startswith("torch")), None)
        for r in rows:
            speed = "%.2fx" % (base / r["ms"]) if base else "-"
            print("%-24s %-28s %-8s %10.4f ms %8.2f TF/s  vs torch %s  relerr %s %s" % (
                name(s), r["impl"], r["backend"], r["ms"], r["tflops"], speed, r.get("relerr"), r.get("chosen", "")))


if __name__ == "__main__":
    main()
