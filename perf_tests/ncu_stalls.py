#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction samples.

Reads the SASS page of a report taken with the SourceCounters section,

  ncu --section SourceCounters -k regex:FlashSm90 --launch-skip 20 --launch-count 1 -o flash BINARY ...
  ncu -i flash.ncu-rep --page source --csv --print-source sass > flash.csv

and prints each stall reason's share of the warp samples, then the
instructions that drew the most samples with their leading reasons and how
often they ran (the kernel's prologue runs once a warp, its loop once a tile):

  perf_tests/ncu_stalls.py flash.csv [--top 40]
"""
import argparse, csv


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header = rows[1]  # rows[0] names the kernel
    at = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total, by_reason, instructions = 0, dict.fromkeys(reasons, 0), []
    for r in rows[2:]:
        try:
            samples = int(r[at["Warp Stall Sampling (All Samples)"]])
        except (ValueError, IndexError):
            continue
        stalls = {h: int(r[at[h]]) for h in reasons if r[at[h]] not in ("", "0")}
        for h, n in stalls.items():
            by_reason[h] += n
        total += samples
        instructions.append((samples, r[at["Address"]], r[at["Source"]].strip(), stalls,
                             r[at["Instructions Executed"]]))
    print("%d samples over %d instructions" % (total, len(instructions)))
    for h, n in sorted(by_reason.items(), key=lambda x: -x[1]):
        if n:
            print("  %-24s %5.1f %%" % (h, 100.0 * n / total))
    print("instructions drawing the most samples:")
    for samples, address, source, stalls, executed in sorted(instructions, key=lambda x: -x[0])[:args.top]:
        lead = ", ".join("%s %d" % (h[6:], n) for h, n in sorted(stalls.items(), key=lambda x: -x[1])[:3])
        print("%5.1f %%  %s  %-58s  ran %s  (%s)" % (100.0 * samples / total, address[-5:], source[:58], executed,
                                                   lead))


if __name__ == "__main__":
    main()
