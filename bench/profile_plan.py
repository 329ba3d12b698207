"""The decode plan kernel alone, for a profiler or a quick timing: plan.update on one batch of lengths.

    python -m bench.profile_plan [--lens 256x4096] [--dtype fp8|bf16]
        timing: decode_bench's hopperkit_plan row for this batch (CUDA-graph median of back-to-back calls)
    python -m bench.profile_plan --ncu [--lens ...]
        `calls` eager plan.update calls between cudaProfilerStart / Stop, for
        scripts/profile_sass.sh plan decode_plan_kernel --skip 3 -- python3 -m bench.profile_plan --ncu

--lens takes "COUNTxLEN" groups joined by "+", as decode_scenarios.json spells them (e.g. 1x65536+15x4096).
HOPPERKIT_DECODE_ALIGN_DIV and the other plan switches apply as in the benchmarks (read once per process).
"""
from __future__ import annotations

import argparse

import torch

from bench import decode_bench


def parse_lens(text: str) -> list[int]:
    """'256x4096' or '1x65536+15x4096' -> the list of lengths."""
    lens: list[int] = []
    for group in text.split("+"):
        count, _, length = group.partition("x")
        if not (count.isdigit() and length.isdigit() and int(count) >= 1):
            raise ValueError(f"--lens: expected COUNTxLEN groups joined by '+', got {text!r}")
        lens += [int(length)] * int(count)
    return lens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lens", default="256x4096", help="COUNTxLEN groups joined by '+' (default: the plan target)")
    ap.add_argument("--dtype", default="fp8", choices=("fp8", "bf16"))
    ap.add_argument("--calls", type=int, default=20, help="--ncu: eager calls profiled")
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--kv-heads", type=int, default=1, help="KV heads (pairs = batch x KV heads; 8 query heads each)")
    ap.add_argument("--ncu", action="store_true", help="eager calls between cudaProfilerStart / Stop")
    args = ap.parse_args(argv)
    lens = parse_lens(args.lens)
    if not torch.cuda.is_available():
        raise SystemExit("profile_plan needs a CUDA GPU")
    import hopperkit
    kv = torch.float8_e4m3fn if args.dtype == "fp8" else torch.bfloat16
    plan = hopperkit.DecodePlan(len(lens), 8 * args.kv_heads, args.kv_heads, kv_dtype=kv)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    page = args.block_size

    def update():
        plan.update(seq, block_size=page, max_blocks_per_seq=(max(lens) + page - 1) // page, max_seq_len=max(lens))

    update()
    torch.cuda.synchronize()
    C = int(plan.arrays()["header"][0])
    if args.ncu:
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(args.calls):
            update()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"profiled {args.calls} plan.update calls; batch {len(lens)}, {C} CTAs")
        return 0
    # the benchmark's own plan row (decode_bench.plan_row: PLAN_CALLS calls per graph), so the numbers compare
    cfg = {"num_q_heads": 8 * args.kv_heads, "num_kv_heads": args.kv_heads, "q_len": 1, "block_size": page}
    row = decode_bench.plan_row(args.lens, cfg, lens, args.dtype, replays=30, warmup=5)
    if not row.get("ok"):
        raise SystemExit(f"plan.update failed: {row.get('skip_reason')}")
    print(f"plan.update {row['us']:.2f} us; batch {len(lens)} x {args.kv_heads} KV heads, {C} CTAs ({args.dtype})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
