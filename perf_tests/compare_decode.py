#!/usr/bin/env python3
"""Runs KokkosMLA's decode benchmarks (CachePlan over a paged cache) and the
PyTorch absorbed decode back to back, and appends one JSON object per line:
shape [B,Tq,H,D,R], Tq, S, page, Dr, dtype, impl, backend, ms (median),
relerr (against float64), GBps (the cache read once + q + out) and TFLOP/s,
and the device's copy bandwidth and SGEMM rate measured in the same run.

PyTorch baseline (TF32 off), in the same dtype, on a contiguous cache:
  qa = q . w_uk^T per head (the query absorbed into the latent space),
  scores = scale * (qa . latent^T + q_rope . k_rope^T), causal for Tq > 1,
  softmax, oa = p . latent, out = oa . w_uv per head.

With --dtype float32 it also runs the float decode on the CacheBlocked and
CacheGemm paths (decode_blocked/float/..., decode_gemm/float/..., rows
kokkosmla-cache-blocked and kokkosmla-cache-gemm) where the benchmark has
them, for an A/B of the paths in the same run, and the float
decode on tensor cores with TF32 and 3xTF32 products (decode/tf32/...,
decode/fp32emu/...: rows of dtype tf32 and fp32emu, against PyTorch fp32).
With --dtype bfloat16 or float16 it also times the tensor-core attention alone
(decode_attention/bf16/... or fp16/..., absorbed queries in, oa out) as FlashMLA's own
benchmark times its kernel (on Hopper builds the mma.sync kernel's beside it,
decode_attention_sm80/..., rows kokkosmla-decode-attention-sm80), and with --flashmla FILE adds the lines of a
FlashMLA benchmark run on the same GPU ("flashmla b=.. s_q=1 h_q=.. s_k=..
time_us=..", and optionally "check flashmla b=.. s_q=.. h_q=.. s_k=.. relerr=.."
for the row's error); these rows count FLOPs and bytes by FlashMLA's formulas
(attention only: 2 B H S (576 + 512) FLOPs; cache + q + oa bytes).
With --fp8 (and --dtype bfloat16) it also runs bf16 queries over FlashMLA's
FP8 cache (decode/fp8/..., decode_attention/fp8/...: rows of dtype fp8, the
cache's bytes counted as 656 a token).
With --sparse it runs only the sparse decode's attention
(decode_sparse_attention/fp8|bf16/...: B = 128, S = 32768, topk = 2048, 64
and 128 heads, and the sparse prefill B = 1, T = 4096, H = 128, S = 8192; rows kokkosmla-sparse counting the listed tokens' bytes and
2 B Tq H topk (576 + 512) FLOPs), and with --flashmla FILE FlashMLA's sparse
lines ("flashmla-sparse b=.. s_q=.. h_q=.. s_k=.. topk=.. time_us=..").

  compare_decode.py --bench build/perf_tests/kokkosmla_perf_tests --out perf_tests/results/h200.jsonl --append
  compare_decode.py --bench ... --dtype bfloat16 --filter _Tq1_ --flashmla flashmla.txt --out ...
"""
import argparse, json, math, os, re

from compare_torch import benchmark_medians

SHAPES = [(128, tq, h, s) for h in (16, 128) for tq in (1, 2) for s in (4096, 8192)]
D, R, DR, PAGE = 128, 512, 64, 64


def decode_flops(B, Tq, H, S):
    return B * Tq * H * (4 * D * R + 2 * S * (R + DR) + 2 * S * R)


# Benchmark name prefix, row label and element size of each dtype.
TYPES = {"float32": ("float", "float32", 4), "bfloat16": ("bf16", "bf16", 2), "float16": ("fp16", "fp16", 2)}
# Bytes of one cached token by the benchmark's type name: R + Dr values, or FlashMLA's FP8 token.
TOKEN_BYTES = {"float": 4 * (R + DR), "bf16": 2 * (R + DR), "fp16": 2 * (R + DR), "fp8": 656}
SPARSE_SHAPES = [(128, tq, h, 32768) for h in (64, 128) for tq in (1, 2)] + [(1, 4096, 128, 8192)]  # + prefill
TOPK = 2048


def decode_bytes(B, Tq, H, S, size=4, token=None):
    return (token or size * (R + DR)) * B * S + size * B * Tq * H * (2 * D + DR)


def attention_flops(B, Tq, H, S):
    return 2 * B * Tq * H * S * (R + DR + R)


def attention_bytes(B, Tq, H, S, token=2 * (R + DR), tokens=None):
    """The cache's tokens (B S, or the listed ones) and bf16 q and oa."""
    return token * (tokens or B * S) + 2 * B * Tq * H * (R + DR + R)


def name(B, Tq, H, S):
    return "B%d_Tq%d_H%d_S%d_R%d_Dr%d_P%d" % (B, Tq, H, S, R, DR, PAGE)


def row(B, Tq, H, S, impl, backend, ms, relerr, dtype="float32", label=None):
    label = label or TYPES[dtype][1]
    return dict(shape=[B, Tq, H, D, R], Tq=Tq, S=S, page=PAGE, Dr=DR, dtype=label, impl=impl,
                backend=backend, ms=round(ms, 5), relerr=relerr,
                GBps=round(decode_bytes(B, Tq, H, S, TYPES[dtype][2], TOKEN_BYTES.get(label)) / ms / 1e6, 1),
                tflops=round(decode_flops(B, Tq, H, S) / ms / 1e9, 3))


def attention_row(B, Tq, H, S, impl, backend, ms, dtype="bfloat16", label=None, topk=0):
    """A row of the attention alone, counted as FlashMLA counts it (sparse: the listed keys)."""
    label = label or TYPES[dtype][1]
    keys = topk or S
    r = dict(shape=[B, Tq, H, D, R], Tq=Tq, S=S, page=PAGE, Dr=DR, dtype=label, impl=impl, backend=backend,
             ms=round(ms, 5), relerr=None, counted="flashmla-attention",
             GBps=round(attention_bytes(B, Tq, H, keys, TOKEN_BYTES.get(label, 2 * (R + DR)),
                                        B * Tq * topk if topk else None) / ms / 1e6, 1),
             tflops=round(attention_flops(B, Tq, H, keys) / ms / 1e9, 3))
    if topk:
        r["topk"] = topk
    return r


def torch_decode(torch, q, q_rope, lat, rope, wk, wv):
    """PyTorch's absorbed decode (the baseline): one einsum per product."""
    Tq, S = q.shape[1], lat.shape[1]
    qa = torch.einsum("bthd,rhd->bthr", q, wk)
    scores = torch.einsum("bthr,bsr->bths", qa, lat) + torch.einsum("bthe,bse->bths", q_rope, rope)
    scores = scores * (1.0 / math.sqrt(D + DR))
    if Tq > 1:  # query t sits at S - Tq + t
        s = torch.arange(S, device=q.device)
        t = torch.arange(Tq, device=q.device)
        scores = scores.masked_fill((s[None, :] > S - Tq + t[:, None])[None, :, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("bthr,rhd->bthd", torch.einsum("bths,bsr->bthr", p, lat), wv)


def torch_decode_inputs(torch, B, Tq, H, S, dtype, dev):
    """The baseline's random inputs: q, q_rope, latent, k_rope, w_uk, w_uv."""
    g = torch.Generator(device=dev).manual_seed(0)
    args = [torch.randn(B, Tq, H, D, device=dev, generator=g), torch.randn(B, Tq, H, DR, device=dev, generator=g),
            torch.randn(B, S, R, device=dev, generator=g), torch.randn(B, S, DR, device=dev, generator=g),
            torch.randn(R, H, D, device=dev, generator=g) / math.sqrt(R),
            torch.randn(R, H, D, device=dev, generator=g) / math.sqrt(R)]
    return [a.to(getattr(torch, dtype)) for a in args]


def torch_decode_error(torch, args):
    """The baseline's relative error against itself in float64."""
    out = torch_decode(torch, *args)
    ref = torch_decode(torch, *[a.double() for a in args])
    return float((out.double() - ref).norm() / ref.norm())


def run_torch(shapes, dtype="float32"):
    import torch
    import triton.testing as tt
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"

    rows = []
    for (B, Tq, H, S) in shapes:
        args = torch_decode_inputs(torch, B, Tq, H, S, dtype, dev)
        err = torch_decode_error(torch, args)
        ms = tt.do_bench(lambda: torch_decode(torch, *args), warmup=25, rep=200, return_mode="median")
        r = row(B, Tq, H, S, "torch-absorbed-decode", "torch-cuda", ms, err, dtype)
        rows.append(r)
        print(json.dumps(r), flush=True)
        del args
        torch.cuda.empty_cache()
    x = torch.empty(2 * 1024**3 // 4, device=dev); y = torch.empty_like(x)
    ms = tt.do_bench(lambda: y.copy_(x), return_mode="median")
    copy = round(2 * x.numel() * 4 / ms / 1e6, 1)
    del x, y
    a = torch.randn(8192, 8192, device=dev); b = torch.randn(8192, 8192, device=dev)
    sgemm = round(2 * 8192**3 / tt.do_bench(lambda: a @ b, return_mode="median") / 1e9, 1)
    rows.append(dict(impl="ceilings", backend="torch-cuda", copy_GBps=copy, sgemm_TFLOPs=sgemm))
    print(json.dumps(rows[-1]), flush=True)
    return rows


def run_ours(args, shapes):
    names = "|".join(name(*s) for s in shapes)
    prefix = TYPES[args.dtype][0] + ("|fp8" if args.fp8 else "") + ("|tf32|fp32emu" if args.dtype == "float32" else "")
    flt = "^decode(_blocked|_gemm)?/(%s)/(%s)" % (prefix, names)
    if args.dtype != "float32":
        flt = "^decode(_attention|_attention_sm80)?/(%s)/(%s)" % (prefix, names)
    if args.sparse:
        flt = "^decode_sparse_attention/(fp8|bf16)/(%s)_K%d" % (names, TOPK)
    rows = []
    medians, context = benchmark_medians(args.bench, args.repetitions, flt)
    scratch = context.get("team_scratch") or args.team_scratch
    for b in medians:
        kind, label, shape = b["run_name"].split("/")[:3]
        label = None if label == TYPES[args.dtype][0] else label  # the dtype's own rows
        B, Tq, H, S = (int(x) for x in re.findall(r"\d+", shape)[:4])
        if kind == "decode_sparse_attention":
            r = attention_row(B, Tq, H, S, "kokkosmla-sparse", args.backend, b["real_time"], args.dtype, label, TOPK)
        elif kind.startswith("decode_attention"):
            impl = "kokkosmla-decode-attention" + ("-sm80" if kind.endswith("_sm80") else "")
            r = attention_row(B, Tq, H, S, impl, args.backend, b["real_time"], args.dtype, label)
        else:
            impl = {"decode_registers": "kokkosmla-cache-registers", "decode_blocked": "kokkosmla-cache-blocked",
                    "decode_gemm": "kokkosmla-cache-gemm"}.get(kind, "kokkosmla-cache")
            r = row(B, Tq, H, S, impl, args.backend, b["real_time"], b.get("relerr"), args.dtype, label)
        r["plan"] = b.get("label", "")
        r["splits"] = b.get("splits")
        r["commit"] = context.get("git_hash")
        r["team_scratch"] = int(scratch) if scratch else None
        rows.append(r)
    return rows


def read_flashmla(path, shapes, sparse):
    """Rows of a FlashMLA benchmark run's output lines for the shapes asked for:
    its sparse lines with --sparse, else its dense ones (a sparse and a dense
    shape can share B, Tq, H and S). A line "check <impl> b=.. s_q=.. h_q=..
    s_k=.. relerr=.." gives that shape's row its error against a reference."""
    wanted = "flashmla-sparse" if sparse else "flashmla"
    found, errors = [], {}  # (shape, row) of each time line; each check line's error by shape
    for line in open(path):
        words = line.split()
        checked = len(words) > 1 and words[0] == "check"
        if checked:
            words = words[1:]
        if not words or words[0] != wanted:
            continue
        f = dict(kv.split("=") for kv in words[1:] if "=" in kv)
        key = (int(f["b"]), int(f["s_q"]), int(f["h_q"]), int(f["s_k"]))
        if checked:
            errors[key] = float(f["relerr"])
        elif key in shapes:
            found.append((key, attention_row(*key, wanted, "cuda", float(f["time_us"]) / 1e3,
                                             label="fp8" if sparse else None, topk=int(f.get("topk", 0)))))
    for key, r in found:
        r["relerr"] = errors.get(key)
    return [r for _, r in found]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--backend", default="cuda")
    p.add_argument("--filter", default="", help="regex on B..._Tq..._H..._S... names")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--device", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--append", action="store_true")
    p.add_argument("--dtype", default="float32", choices=sorted(TYPES))
    p.add_argument("--flashmla", default="", help="output of a FlashMLA benchmark run on the same GPU")
    p.add_argument("--fp8", action="store_true", help="bf16 queries over an FP8 cache beside bf16 (--dtype bfloat16)")
    p.add_argument("--sparse", action="store_true", help="the sparse decode's attention alone (no PyTorch baseline)")
    p.add_argument("--team-scratch", type=int, default=0,
                   help="team scratch bytes to record when the benchmark does not report them")
    args = p.parse_args()
    shapes = [s for s in (SPARSE_SHAPES if args.sparse else SHAPES) if re.search(args.filter, name(*s))]
    torch_rows = [] if args.sparse else run_torch(shapes, args.dtype)
    ours = run_ours(args, shapes) + (
        read_flashmla(args.flashmla, shapes, args.sparse) if args.flashmla and os.path.exists(args.flashmla) else [])
    import torch
    device = args.device or torch.cuda.get_device_name()
    with open(args.out, "a" if args.append else "w") as f:
        for r in torch_rows + ours:
            r["device"] = device
            f.write(json.dumps(r) + "\n")
    base = {(r["shape"][0], r["Tq"], r["shape"][2], r["S"]): r["ms"] for r in torch_rows if "shape" in r}
    flashmla = {(r["shape"][0], r["Tq"], r["shape"][2], r["S"]): r["ms"] for r in ours if r["impl"] == "flashmla"}
    flashmla.update({(r["shape"][0], r["Tq"], r["shape"][2], r["S"]): r["ms"] for r in ours
                     if r["impl"] == "flashmla-sparse"})
    for r in torch_rows[:-1] + ours:
        key = (r["shape"][0], r["Tq"], r["shape"][2], r["S"])
        anchor = " vs flashmla %.2fx" % (flashmla[key] / r["ms"]) if key in flashmla else ""
        torch_ratio = " vs torch %.2fx" % (base[key] / r["ms"]) if key in base else ""
        print("%-34s %-26s %-5s %9.4f ms %8.1f GB/s %7.2f TF/s %s%s  relerr %s" % (
            name(*key), r["impl"], r["dtype"], r["ms"], r["GBps"], r["tflops"], torch_ratio, anchor, r["relerr"]))
    if torch_rows:
        print("copy bandwidth %.1f GB/s" % torch_rows[-1]["copy_GBps"])


if __name__ == "__main__":
    main()
