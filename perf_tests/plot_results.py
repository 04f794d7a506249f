#!/usr/bin/env python3
"""Plots achieved prefill TFLOP/s (useful FLOPs of the Decompressed count) per
shape and implementation from perf_tests/results/h200.jsonl: fp32 per
algorithm against the SGEMM ceiling measured in the same campaign (the first
run of each series, and Auto's newest beside it), and the
tensor-core types (bf16, fp16, TF32; the newest run of each, T = 1K..32K at
H = 16 included) against PyTorch in the same dtype (TF32: against PyTorch's
fp32, TF32 off); and bf16 decoding (Tq = 1, FlashMLA's
shapes) in GB/s against FlashMLA and the copy bandwidth of the same run; and
the attention kernel's time over the FP8 latent cache beside bf16's, dense and
sparse top-k (against FlashMLA's sparse decoding).

  python3 perf_tests/plot_results.py perf_tests/results/h200.jsonl docs/h200_tflops.png
"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

src, dst = sys.argv[1], sys.argv[2]
# The H200's rows: the file also keeps same-run rows of an H100 (their device
# says so), which these panels and the ceiling leave out.
rows = [r for r in map(json.loads, open(src)) if "H100" not in r.get("device", "")]
sgemm = max(r["sgemm_TFLOPs"] for r in rows if r.get("impl") == "ceilings")
gpu = [r for r in rows if r.get("backend") in ("cuda", "torch-cuda") and "shape" in r and "Tq" not in r]


def pick(dtype, impl, shape, newest):
    """The first (or the newest) row of this dtype, implementation and shape (older rows first)."""
    hit = [r for r in gpu if r.get("dtype", "float32") == dtype and r["impl"] == impl and tuple(r["shape"]) == shape]
    return hit[-1 if newest else 0]["tflops"] if hit else None


def panel(ax, series, shapes, title, ylabel, newest=False):
    width = 0.8 / len(series)
    for k, (label, dtype, impl, *own_newest) in enumerate(series):
        xs, ys = [], []
        for i, s in enumerate(shapes):
            y = pick(dtype, impl, s, own_newest[0] if own_newest else newest)
            if y is not None:
                xs.append(i + (k - (len(series) - 1) / 2) * width)
                ys.append(y)
        ax.bar(xs, ys, width, label=label)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(["B%d T%d\nH%d D%d R%d" % s for s in shapes], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")


fp32_shapes = []
for r in gpu:
    if r.get("dtype", "float32") == "float32" and tuple(r["shape"]) not in fp32_shapes:
        fp32_shapes.append(tuple(r["shape"]))
tensor_shapes = []
for r in gpu:
    if r.get("dtype") in ("bfloat16", "tf32") and tuple(r["shape"]) not in tensor_shapes:
        tensor_shapes.append(tuple(r["shape"]))

fig, (top, bottom, third, fourth) = plt.subplots(4, 1, figsize=(11, 17))
panel(top, [("torch-decompress-sdpa", "float32", "torch-decompress-sdpa"),
            ("kokkosmla-auto (first run)", "float32", "kokkosmla-auto"),
            ("kokkosmla-auto (newest run; attention by GEMMs at D = 128)", "float32", "kokkosmla-auto", True),
            ("kokkosmla-decompressed", "float32", "kokkosmla-decompressed"),
            ("kokkosmla-fused", "float32", "kokkosmla-fused"),
            ("kokkosmla-absorbed", "float32", "kokkosmla-absorbed"),
            ("kokkosmla fp32emu (3xTF32, emulate_fp32)", "fp32emu", "kokkosmla-auto")],
      fp32_shapes, "Causal MLA prefill, fp32 (TF32 off), one H200", "useful TFLOP/s (Decompressed count)")
top.axhline(sgemm, color="k", linestyle="--", label="SGEMM ceiling (%.1f TFLOP/s)" % sgemm)
top.legend(fontsize=7, loc="lower right")
panel(bottom, [("torch bf16 (decompress + SDPA)", "bfloat16", "torch-decompress-sdpa"),
               ("kokkosmla bf16 (FlashSm90 on Hopper)", "bfloat16", "kokkosmla-auto"),
               ("kokkosmla bf16, mma.sync (FlashTensorSm80)", "bfloat16", "kokkosmla-flashtensorsm80"),
               ("torch fp16", "float16", "torch-decompress-sdpa"),
               ("kokkosmla fp16", "float16", "kokkosmla-auto"),
               ("kokkosmla tf32 (allow_tf32)", "tf32", "kokkosmla-auto"),
               ("torch fp32, TF32 off", "float32", "torch-decompress-sdpa")],
      tensor_shapes, "Tensor cores: bf16 / fp16 / TF32 (newest run of each), one H200",
      "useful TFLOP/s (Decompressed count)", newest=True)
decode = [r for r in rows if r.get("dtype") == "bf16" and r.get("Tq") == 1 and "shape" in r and "topk" not in r]
decode_shapes = []
for r in decode:
    key = (r["shape"][0], r["shape"][2], r["S"])
    if key not in decode_shapes:
        decode_shapes.append(key)
decode_impls = [("PyTorch bf16 (absorbed, einsum)", "torch-absorbed-decode"),
                ("KokkosMLA CachePlan (with projections)", "kokkosmla-cache"),
                ("KokkosMLA attention kernel", "kokkosmla-decode-attention"), ("FlashMLA", "flashmla")]
width = 0.8 / len(decode_impls)
for k, (label, impl) in enumerate(decode_impls):
    xs, ys = [], []
    for i, key in enumerate(decode_shapes):
        hit = [r for r in decode
               if r["impl"] == impl and (r["shape"][0], r["shape"][2], r["S"]) == key and "GBps" in r]
        if hit:  # the newest row with a bandwidth (query-layout and capture rows time the step alone)
            xs.append(i + (k - (len(decode_impls) - 1) / 2) * width)
            ys.append(hit[-1]["GBps"])
    third.bar(xs, ys, width, label=label)
copies = [r["copy_GBps"] for r in rows if r.get("impl") == "ceilings" and "copy_GBps" in r]
if copies:
    third.axhline(copies[-1], color="k", linestyle="--", label="copy bandwidth (%.0f GB/s)" % copies[-1])
third.set_xticks(range(len(decode_shapes)))
third.set_xticklabels(["B%d H%d S%d" % s for s in decode_shapes], fontsize=8)
third.set_ylabel("GB/s (cache + q + out read/written once)")
third.set_title("bf16 decoding, paged cache (page 64), latent 512 + RoPE 64, one H200")
third.legend(fontsize=7, loc="upper right")


def newest_time(impl, dtype, shape, S, sparse):
    """Milliseconds of the newest Tq = 1 row of this kind that has a bandwidth (a timed kernel)."""
    hit = [r for r in rows if r.get("impl") == impl and r.get("dtype") == dtype and r.get("Tq") == 1
           and tuple(r.get("shape", ())) == shape and r.get("S") == S and ("topk" in r) == sparse and "GBps" in r]
    return hit[-1]["ms"] if hit else None


# FP8 latent cache (FlashMLA's 656-byte token): the attention kernel beside bf16's, dense and sparse top-k.
fp8_cases = [((128, 1, h, 128, 512), s, False) for h in (16, 128) for s in (4096, 8192)]
fp8_cases += [((128, 1, h, 128, 512), 32768, True) for h in (64, 128)]
fp8_series = [("KokkosMLA attention kernel, bf16 cache", "kokkosmla-decode-attention", "bf16", "kokkosmla-sparse"),
              ("KokkosMLA attention kernel, FP8 cache", "kokkosmla-decode-attention", "fp8", "kokkosmla-sparse"),
              ("FlashMLA, FP8 cache (sparse)", None, "fp8", "flashmla-sparse")]
width = 0.8 / len(fp8_series)
for k, (label, dense_impl, dtype, sparse_impl) in enumerate(fp8_series):
    xs, ys = [], []
    for i, (shape, S, sparse) in enumerate(fp8_cases):
        impl = sparse_impl if sparse else dense_impl
        ms = newest_time(impl, dtype, shape, S, sparse) if impl else None
        if ms is not None:
            xs.append(i + (k - (len(fp8_series) - 1) / 2) * width)
            ys.append(ms)
    fourth.bar(xs, ys, width, label=label)
fourth.set_xticks(range(len(fp8_cases)))
fourth.set_xticklabels(["B%d H%d S%d%s" % (shape[0], shape[2], S, "\ntop-k 2048" if sparse else "")
                        for shape, S, sparse in fp8_cases], fontsize=8)
fourth.set_ylabel("ms (lower is better)")
fourth.set_title("Decoding, Tq = 1: FP8 latent cache beside bf16, dense and sparse top-k, one H200")
fourth.legend(fontsize=7, loc="upper left")
fig.tight_layout()
fig.savefig(dst, dpi=110)
