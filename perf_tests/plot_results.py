#!/usr/bin/env python3
"""Plots achieved fp32 prefill TFLOP/s (useful FLOPs of the Decompressed count) per
shape and implementation from perf_tests/results/h200.jsonl, against the
SGEMM ceiling measured in the same campaign.

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
shapes = []
for r in gpu:
    if tuple(r["shape"]) not in shapes:
        shapes.append(tuple(r["shape"]))
impls = ["torch-decompress-sdpa", "kokkosmla-auto", "kokkosmla-decompressed", "kokkosmla-fused", "kokkosmla-absorbed"]
fig, ax = plt.subplots(figsize=(11, 5))
width = 0.16
for k, impl in enumerate(impls):
    xs, ys = [], []
    for i, s in enumerate(shapes):
        hit = [r for r in gpu if tuple(r["shape"]) == s and r["impl"] == impl]
        if hit:
            xs.append(i + (k - 2) * width)
            ys.append(hit[0]["tflops"])
    ax.bar(xs, ys, width, label=impl)
ax.axhline(sgemm, color="k", linestyle="--", label="SGEMM ceiling (%.1f TFLOP/s)" % sgemm)
ax.set_xticks(range(len(shapes)))
ax.set_xticklabels(["B%d T%d\nH%d D%d R%d" % s for s in shapes], fontsize=8)
ax.set_ylabel("useful TFLOP/s (fp32, Decompressed count)")
ax.set_yscale("log")
ax.set_title("Causal MLA prefill, fp32, one H200")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
fig.savefig(dst, dpi=110)
