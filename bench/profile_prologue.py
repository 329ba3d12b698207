"""Profiling driver for the attention prologue (use under ncu): one case, warm-up, then one profiled call per
dtype between cudaProfilerStart/Stop.

    ncu --clock-control none --profile-from-start off --kernel-name regex:attention_prologue \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        python -m bench.profile_prologue --case hy3_full --tokens 4096
"""
from __future__ import annotations

import argparse

import torch

from bench import prologue_bench as pb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="hy3_full", choices=sorted(pb.CASES))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--cos-sin-dtype", default="float32", choices=("float32", "bfloat16"),
                    help="the cos/sin table's dtype (the benchmark's is float32)")
    args = ap.parse_args()
    cos_sin = pb.make_cos_sin(pb.MAX_POSITION, pb.ROTARY, "cuda").to(getattr(torch, args.cos_sin_dtype))
    for dtype in args.dtypes.split(","):
        case = pb.make_case(args.case, args.tokens, dtype, 1, "cuda", cos_sin)
        fns, _ = pb.build_hopperkit(case)
        for _ in range(3):
            fns[0]()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        fns[0]()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"{args.case} {args.tokens} {dtype} cos/sin {args.cos_sin_dtype}: profiled one call")


if __name__ == "__main__":
    main()
