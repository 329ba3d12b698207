"""Runs the MoE GPU tests' small cases over many seeds and counts which check fails, to tell a numerical
sensitivity (a tolerance crossed now and then, by an error that grows smoothly) from a race (non-finite
outputs, repeated runs that differ, errors far above the tolerance).

    python3 scripts/moe_seed_sweep.py [--seeds 300] [--tokens 1,7] [--kinds uniform,skewed,sparse,one_expert]
                                      [--block 0]
    python3 scripts/moe_seed_sweep.py --stages 20     # the stage-by-stage and chunked-index tests over 20 run
                                                      # seeds (set HOPPERKIT_MOE_INDEX=chunks to force chunks)

Needs an sm_90 GPU and the installed package (run after scripts/gpu_round.sh). Prints one line per
(tokens, kind): cases, failures by message, how many passing cases still had an end-to-end relative
Frobenius error >= 1e-2 (possible when the tests check the kernel's own activation codes, see
hopperkit.reference.moe_reference_from_kernel_codes), the largest end-to-end error, and a summary.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--tokens", default="1,7")
    ap.add_argument("--kinds", default="uniform,skewed,sparse,one_expert")
    ap.add_argument("--block", type=int, default=0, help="1: block-wise scaling, 0: per-tensor")
    ap.add_argument("--stages", type=int, default=0,
                    help="n > 0: run test_stages_match_reference and test_routing_index_across_chunks under n "
                         "run seeds instead, printing each failure with its seed")
    args = ap.parse_args()
    os.environ.setdefault("HK_TEST_SEED", "0")
    import torch
    import test_moe_gpu as t  # the tests' own case builder and checks
    if args.stages:
        return stage_sweep(t, args.stages)

    block = bool(args.block)
    total_fail = 0
    for T in (int(v) for v in args.tokens.split(",")):
        for kind in args.kinds.split(","):
            fails = collections.Counter()
            worst = 0.0
            crossed = 0  # passing cases whose end-to-end error crosses 1e-2 (the check before session 11)
            for seed in range(args.seeds):
                try:
                    out, ref, _ = t.run_case(T, 256, 256, 16, 4, block, kind=kind, seed=1000 + seed, check_repeat=True)
                    rel = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-6)).item()
                    worst = max(worst, rel)
                    crossed += rel >= 1e-2
                except AssertionError as e:
                    msg = str(e).split("\n")[0]
                    fails[msg.split(" ")[0] + " " + msg.split(" ")[1] if " " in msg else msg] += 1
                    if "relative Frobenius error" in msg:
                        worst = max(worst, float(msg.rsplit(" ", 1)[1]))
            total_fail += sum(fails.values())
            print(f"T={T:3d} {kind:10s} {'block' if block else 'per_tensor'}: {args.seeds} cases, "
                  f"{sum(fails.values())} failed {dict(fails)}; end to end >= 1e-2 in {crossed} passing; "
                  f"largest end-to-end rel. Frobenius error {worst:.3e}")
    torch.cuda.synchronize()
    print(f"moe_seed_sweep: {total_fail} failed")
    return 0


def stage_sweep(t, seeds: int) -> int:
    cases = [("stages", (T, block)) for T in t.STAGE_TOKENS for block in (False, True)]
    cases += [("chunks", c) for c in t.INDEX_CHUNK_CASES]
    fails = collections.Counter()
    for seed in range(1, seeds + 1):
        t.RUN_SEED = seed  # the tests read it when they build their inputs
        for name, c in cases:
            fn = t.test_stages_match_reference if name == "stages" else t.test_routing_index_across_chunks
            try:
                fn(*c)
            except AssertionError as e:
                fails[(name, c)] += 1
                print(f"seed {seed} {name} {c}: {str(e).splitlines()[0][:300]}")
    print(f"moe_seed_sweep --stages: {seeds} seeds x {len(cases)} cases, {sum(fails.values())} failed "
          f"{dict((f'{k[0]}{k[1]}', v) for k, v in fails.items())} (HOPPERKIT_MOE_INDEX="
          f"{os.environ.get('HOPPERKIT_MOE_INDEX', 'default')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
