"""How far the fused MoE's SiLU(gate) * up codes stray from the float32 reference's, measured against the
activation-code check's allowance, to calibrate hopperkit.reference.FP8_MMA_ACCUMULATION_EPS with data.

    python3 scripts/moe_code_error.py [--seeds 4] [--cases 4096x512x256x16x8xblock,16384x256x128x64x2]

Per case (tokens x hidden x intermediate x experts x top_k, "xblock" for block-wise scales) and seed: the codes
beyond one FP8 step (`one_step_allowance`: the check without its accumulation slack), the largest
such excess, and the accumulation error it implies: excess / (the slack at eps = 1), whose maximum over all
codes is the smallest FP8_MMA_ACCUMULATION_EPS that passes them. Needs an sm_90 GPU and the installed package.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--cases", default="4096x512x256x16x8xblock,16384x256x128x64x2,2048x4096x1536x8x2")
    args = ap.parse_args()
    os.environ.setdefault("HK_TEST_SEED", "0")
    import torch
    import hopperkit
    from hopperkit import reference as R
    import test_moe_gpu as t  # the tests' own input builders

    worst_eps = 0.0
    for spec in args.cases.split(","):
        parts = spec.split("x")
        block = parts[-1] == "block"
        T, H, I, E, K = (int(v) for v in parts[:5])
        for seed in range(args.seeds):
            gen = torch.Generator(device="cuda").manual_seed(7000 + seed)
            w13, s13, w2, s2 = t.make_weights(E, H, I, block, gen)
            x = torch.randn(T, H, generator=gen, device="cuda").to(torch.bfloat16)
            ids, tw = t.make_routing(T, K, E, "uniform", gen)
            kw = {} if block else dict(a13_scale=(x.float().abs().max() / 448.0).reshape(1),
                                       a2_scale=torch.tensor([4.0 / 448.0], device="cuda"))
            ws = hopperkit.moe_workspace(T, K, H, I, E, block, "cuda")
            out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
            hopperkit.fused_moe(x, ids, tw, w13, w2, s13, s2, out=out, workspace=ws, **kw)
            torch.cuda.synchronize()
            n_over = n_codes = 0
            max_excess = imp = 0.0
            for c in R.kernel_activation_codes(ws, x, ids, w13, w2, s13, s2, **kw):
                act, ref = c["act"], c["ref"]
                unit = c["slack"] / R.FP8_MMA_ACCUMULATION_EPS  # the slack at eps = 1
                excess = (act - ref).abs() - R.one_step_allowance(ref)
                over = excess > 0
                n_over += int(over.sum())
                n_codes += act.numel()
                if over.any():
                    max_excess = max(max_excess, excess[over].max().item())
                    imp = max(imp, (excess[over] / unit[over].clamp_min(1e-30)).max().item())
            worst_eps = max(worst_eps, imp)
            print(f"{spec} seed {seed}: {n_over} of {n_codes} codes beyond one step, largest excess "
                  f"{max_excess:.3f} code units, implied eps {imp:.3e} (2^{torch.tensor(imp).log2().item():.2f}"
                  f" if > 0); eps in use {R.FP8_MMA_ACCUMULATION_EPS:.3e}", flush=True)
    print(f"moe_code_error: largest implied eps {worst_eps:.3e}; in use {R.FP8_MMA_ACCUMULATION_EPS:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
