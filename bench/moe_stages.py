"""Where a fused-MoE call's time goes: graph-replay medians of the first n kernels (HOPPERKIT_MOE_STAGES=n,
read once per process, so each n runs in its own process).

    python -m bench.moe_stages --cases hy3:tp8_ep1:per_tensor:4,deepseek-v3:tp1_ep8:block:4
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch


def op_calls(model, mode, scaling, bs, nrot=4):
    """nrot closures, each one fused_moe call of the MoE benchmark's shape and routing (model, mode, scaling, bs)
    over its own copy of the weights (rotated so that a CUDA graph of them reads the weights from DRAM)."""
    import hopperkit
    from bench import moe_bench as mb
    anchors = json.loads(mb.find_anchors(None).read_text())
    shape = mb.make_shape(model, anchors["models"][model], mode)
    ids, tw = (t.cuda() for t in mb.make_routing(shape, bs))
    block = scaling == "block"
    w0 = mb.make_weights(shape, scaling, "cuda")
    weights = [w0] + [{k: v.clone() for k, v in w0.items()} for _ in range(nrot - 1)]
    x = torch.randn(bs, shape.hidden, device="cuda").to(torch.bfloat16)
    emap = mb.local_of_global(shape).to(torch.int32).cuda() if shape.e_local != shape.experts else None
    kw = {} if block else dict(a13_scale=(x.float().abs().max() / 448.0).reshape(1),
                               a2_scale=torch.tensor([4.0 / 448.0], device="cuda"))
    ws = hopperkit.moe_workspace(bs, shape.top_k, shape.hidden, shape.inter, shape.e_local, block, "cuda")
    out = torch.empty(bs, shape.hidden, dtype=torch.bfloat16, device="cuda")
    return [lambda w=w: hopperkit.fused_moe(x, ids, tw, w["w13"], w["w2"], w["w13_scale"], w["w2_scale"],
                                            expert_map=emap, out=out, workspace=ws, **kw) for w in weights]


def time_case(model, mode, scaling, bs, ncu=False):
    from bench import common
    fns = op_calls(model, mode, scaling, bs)
    for f in fns:
        f()
    if ncu:  # one profiled call (ncu --profile-from-start off)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        fns[0]()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return 0.0
    return common.time_graph(fns, replays=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="hy3:tp8_ep1:per_tensor:4,deepseek-v3:tp1_ep8:block:4")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ncu", action="store_true", help="one profiled call per case, for ncu --profile-from-start off")
    args = ap.parse_args()
    if args.ncu:
        for c in args.cases.split(","):
            m, mode, sc, bs = c.split(":")
            time_case(m, mode, sc, int(bs), ncu=True)
            print(f"{c}: profiled one call")
        return
    if args.one:
        print(f"{time_case(*args.one.split(':')[:3], int(args.one.split(':')[3])):.1f}")
        return
    for c in args.cases.split(","):
        times = []
        for n in (1, 2, 3, 4):
            env = dict(os.environ, HOPPERKIT_MOE_STAGES=str(n))
            r = subprocess.run([sys.executable, "-m", "bench.moe_stages", "--one", c], env=env,
                               capture_output=True, text=True)
            times.append(r.stdout.strip().splitlines()[-1] if r.returncode == 0 else "err: " + r.stderr[-300:])
        print(f"{c}: first 1..4 kernels: " + " | ".join(f"{t} us" for t in times), flush=True)


if __name__ == "__main__":
    main()
