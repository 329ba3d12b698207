"""Profiling driver for the decode kernel (use under ncu): one scenario, warm-up, then one profiled call per
dtype between cudaProfilerStart/Stop.

    ncu --clock-control none --profile-from-start off --kernel-name regex:decode_attention \
        --section SpeedOfLight --section Occupancy --section WarpStateStats python -m bench.profile_decode

--heads HQ,HKV sets the head layout (default 8,1: the scenarios'; vLLM's shapes are 64,8). --flashinfer profiles
FlashInfer's decode wrapper on the same shape instead (bench/peers/flashinfer_decode.py; the peers bundle:
`source scripts/peers_env.sh`), on the decode benchmark's inputs (bench/decode_bench.py, one rotation set).
"""
from __future__ import annotations

import argparse
import math

import torch

import hopperkit


def build(lens, dtype, hq=8, hkv=1, page=64, seed=0, qlen=1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = [(L + page - 1) // page for L in lens]
    nb = sum(pages) + 1
    k = torch.randn(nb, page, hkv, 128, device="cuda", generator=g).to(dtype)
    v = torch.randn(nb, page, hkv, 128, device="cuda", generator=g).to(dtype)
    perm = torch.randperm(nb - 1, device="cuda", generator=g).to(torch.int32)
    bt = torch.zeros(len(lens), max(pages), dtype=torch.int32, device="cuda")
    at = 0
    for b, n in enumerate(pages):
        bt[b, :n] = perm[at:at + n]
        at += n
    q = torch.randn(len(lens) * qlen, hq, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    return q, k, v, bt, seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", default="64x4096", help="COUNTxLEN[+COUNTxLEN...]")
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--time", action="store_true", help="time a graph of 10 calls (KV re-read: use > L2 sizes)")
    ap.add_argument("--heads", default="8,1", help="HQ,HKV: query and KV heads (vLLM's shapes: 64,8)")
    ap.add_argument("--qlen", type=int, default=1, help="query tokens per request (speculative decoding)")
    ap.add_argument("--flashinfer", action="store_true", help="profile FlashInfer's decode wrapper instead")
    args = ap.parse_args()
    lens = [int(n) for part in args.lens.split("+") for c, n in [part.split("x")] for _ in range(int(c))]
    hq, hkv = (int(x) for x in args.heads.split(","))
    for name in args.dtypes.split(","):
        if args.flashinfer:
            profile_flashinfer(lens, name, hq, hkv)
            continue
        dtype = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[name]
        q, k, v, bt, seq = build(lens, dtype, hq=hq, hkv=hkv, qlen=args.qlen)
        qs = None
        if name == "fp8":
            q, qs = hopperkit.quantize_query_fp8(q)
        one = torch.ones(1, device="cuda")
        plan = hopperkit.DecodePlan(len(lens), q.shape[1], k.shape[2], kv_dtype=dtype, max_q_len=args.qlen)
        plan.update(seq, block_size=k.shape[1], max_blocks_per_seq=bt.shape[1])
        kw = dict(q_scale=qs, k_scale=one if name == "fp8" else None, v_scale=one if name == "fp8" else None)
        for _ in range(3):
            out = hopperkit.decode_attention(q, k, v, bt, seq, plan, **kw)
        torch.cuda.synchronize()
        nbytes = sum(lens) * k.shape[2] * 128 * 2 * k.element_size()
        if args.time:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(10):
                    hopperkit.decode_attention(q, k, v, bt, seq, plan, out=out, **kw)
            g.replay()
            ts = []
            for _ in range(20):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                g.replay()
                e1.record()
                torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1) * 100)  # us per call
            us = sorted(ts)[len(ts) // 2]
            print(f"{args.lens} {name}: {us:.2f} us  {nbytes / us / 1e6:.2f} TB/s  sm_ctas={plan.sm_ctas}")
            continue
        print(f"{name}: sm_ctas={plan.sm_ctas} tiles={sum(math.ceil(L / 64) for L in lens)}")
        torch.cuda.cudart().cudaProfilerStart()
        hopperkit.decode_attention(q, k, v, bt, seq, plan, out=out, **kw)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def profile_flashinfer(lens, name, hq, hkv):
    """FlashInfer's decode wrapper on decode_bench's inputs for this shape: warm-up, then one profiled call."""
    from bench import decode_bench
    from bench.peers import flashinfer_decode
    cfg = decode_bench.DEFAULTS | {"num_q_heads": hq, "num_kv_heads": hkv, "lens": lens}
    case = decode_bench.build_case("profile", cfg, name, 1, "cuda")
    fns, info = flashinfer_decode.build(case)
    for _ in range(3):
        fns[0]()
    torch.cuda.synchronize()
    print(f"flashinfer {name}: {info}")
    torch.cuda.cudart().cudaProfilerStart()
    fns[0]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
