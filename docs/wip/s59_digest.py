"""Session 59: the per-tensor swapped gate-up cases' outputs (16-, 32- and 48-row tiles, with the GEMM-built index
and kernel 1's), each checked against the references by the GPU tests' run_case, hashed into one JSON, so that two
builds can be compared bitwise. Usage: PYTHONPATH=<build> HK_TEST_SEED=1 python3 docs/wip/s59_digest.py OUT.json"""
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
import torch  # noqa: E402
import test_moe_gpu as t  # noqa: E402

cases = {}
for name, c in t.HANDOFF_CASES.items():
    cases["handoff_" + name] = dict(zip("T H I E K kind ep fp8_input".split(), c))
for i, c in enumerate(t.FORTY_EIGHT_ROW_CASES):
    cases[f"r48_{i}"] = dict(zip("T H I E K kind ep fp8_input".split(), c))
for i, c in enumerate(t.THIRTY_TWO_ROW_CASES):
    d = dict(zip("T H I E K kind ep fp8_input block".split(), c))
    if not d.pop("block"):
        cases[f"r32_{i}"] = d
for T in (1, 4, 8, 16, 32, 64):  # decode sizes (the index kernels: 16 / 32 rows)
    cases[f"dec_{T}"] = dict(T=T, H=1024, I=256, E=64, K=8, kind="uniform", ep=False, fp8_input=False)
    cases[f"dec_ep_{T}"] = dict(T=T, H=1024, I=256, E=64, K=8, kind="skewed", ep=True, fp8_input=False)
out = {}
for name, d in cases.items():
    T, H, I, E, K = (d.pop(k) for k in "T H I E K".split())
    o, _, _ = t.run_case(T, H, I, E, K, False, seed=T + H + I + E + 59, check_repeat=True, **d)
    out[name] = hashlib.sha1(o.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
json.dump(out, open(sys.argv[1], "w"), indent=0)
print(len(out), "cases hashed (each checked against the references)")
