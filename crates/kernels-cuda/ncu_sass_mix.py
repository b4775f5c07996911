#!/usr/bin/env python3
"""Summarises an `ncu --page source --print-source sass --csv` report of one kernel: the
warp instructions executed per SASS opcode (and their share of the stall samples), then the
hottest instructions by stall samples. Usage: ncu_sass_mix.py REPORT.csv [TOP]
(device-run.sh's `sass` stage writes such reports; docs/CUDA.md, session 10)."""
import collections
import csv
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    # ncu prints its own log lines before the table; the table starts at the header row.
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address","Source"'))
    rows = list(csv.reader(lines[start:]))
    head, data = rows[0], rows[1:]
    src = head.index("Source")
    execd = head.index("Instructions Executed")
    stall = head.index("Warp Stall Sampling (All Samples)")
    per_op, per_op_stall, hot = collections.Counter(), collections.Counter(), []
    for r in data:
        if len(r) <= max(src, execd, stall) or not r[execd].isdigit():
            continue
        words = r[src].split()
        if not words:
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        op = op.split(".")[0]
        n = int(r[execd])
        s = int(r[stall]) if r[stall].isdigit() else 0
        per_op[op] += n
        per_op_stall[op] += s
        hot.append((s, n, r[src].strip()))
    total = sum(per_op.values()) or 1
    samples = sum(per_op_stall.values()) or 1
    print(f"warp instructions executed: {total}, stall samples: {samples}")
    for op, n in per_op.most_common(top):
        share, stalls = 100 * n / total, 100 * per_op_stall[op] / samples
        print(f"{op:10s} {n:12d} {share:5.1f}%  stall samples {stalls:5.1f}%")
    print("hottest instructions (stall samples, executions, SASS):")
    for s, n, text in sorted(hot, reverse=True)[:top]:
        print(f"{s:6d} {n:10d}  {text}")


if __name__ == "__main__":
    main()
