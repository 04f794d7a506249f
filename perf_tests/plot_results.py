#!/usr/bin/env python3
"""Plots achieved prefill TFLOP/s (useful FLOPs of the Decompressed count) per
shape and implementation from perf_tests/results/h200.jsonl: fp32 per
algorithm against the SGEMM ceiling measured in the same campaign, and the
tensor-core types (bf16, fp16, TF32) against PyTorch in the same dtype (TF32:
against PyTorch's fp32, TF32 off).

  python3 perf_tests/plot_results.py perf_tests/results/h200.jsonl docs/h200_tflops.png
"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

src, dst = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(src)]
sgemm = max(r["sgemm_TFLOPs"] for r in rows if r.get("impl") == "ceilings")
gpu = [r for r in rows if r.get("backend") in ("cuda", "torch-cuda") and "shape" in r and "Tq" not in r]


def first(dtype, impl, shape):
    """The first row of this dtype, implementation and shape (older rows first)."""
    hit = [r for r in gpu if r.get("dtype", "float32") == dtype and r["impl"] == impl and tuple(r["shape"]) == shape]
    return hit[0]["tflops"] if hit else None


def panel(ax, series, shapes, title, ylabel):
    width = 0.8 / len(series)
    for k, (label, dtype, impl) in enumerate(series):
        xs, ys = [], []
        for i, s in enumerate(shapes):
            y = first(dtype, impl, s)
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

fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 9))
panel(top, [("torch-decompress-sdpa", "float32", "torch-decompress-sdpa"),
            ("kokkosmla-auto", "float32", "kokkosmla-auto"),
            ("kokkosmla-decompressed", "float32", "kokkosmla-decompressed"),
            ("kokkosmla-fused", "float32", "kokkosmla-fused"),
            ("kokkosmla-absorbed", "float32", "kokkosmla-absorbed")],
      fp32_shapes, "Causal MLA prefill, fp32 (TF32 off), one H200", "useful TFLOP/s (Decompressed count)")
top.axhline(sgemm, color="k", linestyle="--", label="SGEMM ceiling (%.1f TFLOP/s)" % sgemm)
top.legend(fontsize=7, loc="lower right")
panel(bottom, [("torch bf16 (decompress + SDPA)", "bfloat16", "torch-decompress-sdpa"),
               ("kokkosmla bf16", "bfloat16", "kokkosmla-auto"),
               ("torch fp16", "float16", "torch-decompress-sdpa"),
               ("kokkosmla fp16", "float16", "kokkosmla-auto"),
               ("kokkosmla tf32 (allow_tf32)", "tf32", "kokkosmla-auto"),
               ("torch fp32, TF32 off", "float32", "torch-decompress-sdpa")],
      tensor_shapes, "Tensor cores: bf16 / fp16 / TF32, one H200", "useful TFLOP/s (Decompressed count)")
fig.tight_layout()
fig.savefig(dst, dpi=110)
