"""Per-kernel times of hopperkit.fused_moe (torch.profiler / CUPTI), for finding where a case's time goes.

    python -m bench.profile_moe --cases hy3:tp8_ep1:per_tensor:4,deepseek-v3:tp1_ep8:block:4
Each case: model shapes from moe_shapes.json, random routing, 20 calls after warm-up, each kernel's mean time.
Weights rotate over copies that together exceed L2, as in the benchmark.
"""
from __future__ import annotations

import argparse
import collections

import torch

import hopperkit
from bench import moe_bench as mb


def profile_case(model: str, mode: str, scaling: str, bs: int, anchors: dict) -> str:
    shape = mb.make_shape(model, anchors["models"][model], mode)
    ids, tw = (t.cuda() for t in mb.make_routing(shape, bs))
    weights = [mb.make_weights(shape, scaling, "cuda") for _ in range(3)]
    block = scaling == "block"
    x = torch.randn(bs, shape.hidden, device="cuda").to(torch.bfloat16)
    emap = mb.local_of_global(shape).to(torch.int32).cuda() if shape.e_local != shape.experts else None
    a13 = (x.float().abs().max() / 448.0).reshape(1)
    a2 = torch.tensor([4.0 / 448.0], device="cuda")
    ws = hopperkit.moe_workspace(bs, shape.top_k, shape.hidden, shape.inter, shape.e_local, block, "cuda")
    out = torch.empty(bs, shape.hidden, dtype=torch.bfloat16, device="cuda")

    def call(w):
        kw = {} if block else dict(a13_scale=a13, a2_scale=a2)
        hopperkit.fused_moe(x, ids, tw, w["w13"], w["w2"], w["w13_scale"], w["w2_scale"], expert_map=emap,
                            out=out, workspace=ws, **kw)

    for i in range(6):
        call(weights[i % 3])
    torch.cuda.synchronize()
    n = 30
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            call(weights[i % 3])
        torch.cuda.synchronize()
    per = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            name = ev.name.split("(")[0].split("<")[0].replace("void ", "").split("::")[-1]
            if "moe" in ev.name:
                key = name + ("<" + ev.name.split("<")[1].split(">")[0] + ">" if "<" in ev.name else "")
                per[key] += ev.device_time / n if hasattr(ev, "device_time") else ev.cuda_time / n
    total = sum(per.values())
    lines = [f"{model} {mode} {scaling} bs={bs}: kernels sum {total:.1f} us"]
    lines += [f"    {k:60s} {v:8.1f} us" for k, v in sorted(per.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="hy3:tp8_ep1:per_tensor:4,hy3:tp8_ep1:per_tensor:256,"
                                       "deepseek-v3:tp1_ep8:block:4,deepseek-v3:tp8_ep1:per_tensor:4096")
    args = ap.parse_args()
    import json
    anchors = json.loads(mb.find_anchors(None).read_text())
    for c in args.cases.split(","):
        model, mode, scaling, bs = c.split(":")
        print(profile_case(model, mode, scaling, int(bs), anchors), flush=True)


if __name__ == "__main__":
    main()
