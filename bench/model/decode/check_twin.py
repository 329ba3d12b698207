"""Cross-check plan_model.current_plan against the compiled CPU twin (decode_plan_cpu via the binding)."""
import os, random, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
from hopperkit import _core
import plan_model as pm

def twin(lens, max_ctas=264, long_ctas=132, max_chunks=3):
    cfg = _core.call("make_config", len(lens), 8, 1, 0, 1, 0, 0, max_ctas)
    cfg[12] = long_ctas; cfg[13] = max_chunks
    cfg = _core.call("plan_launch_info", cfg, len(lens), 64, 0)
    mb = max(1, max(pm.ntiles(l) for l in lens))
    raw = _core.call("plan_cpu", cfg, list(lens), 64, mb, 0)
    lay = _core.call("plan_layout", cfg)
    ws = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    get = lambda k, n: ws[lay[k]:lay[k] + 4 * n].view(torch.int32).tolist()
    hdr = get("header", 16); C = hdr[0]; P = len(lens)
    return dict(C=C, by_sm=hdr[8], starts=get("cta_tile_start", C + 1), pieces=get("pair_num_pieces", P),
                first_slot=get("pair_first_slot", P))

def compare(lens):
    t = twin(lens); m = pm.current_plan(lens)
    ok = (t["C"] == m.C and t["starts"] == m.starts and t["pieces"] == m.pieces and bool(t["by_sm"]) == m.by_sm)
    return ok, t, m

bad = 0
for name, lens in pm.scenarios().items():
    ok, t, m = compare(lens)
    print(f"{name:16s} twin C={t['C']:3d} by_sm={t['by_sm']}  model C={m.C:3d} by_sm={int(m.by_sm)}  "
          f"max pieces twin={max(t['pieces'])} model={max(m.pieces)}  match={ok}")
    bad += not ok
rng = random.Random(1)
for trial in range(400):
    B = rng.randint(1, 96)
    kind = rng.random()
    lens = [rng.choice([0, rng.randint(1, 200), rng.randint(1, 5000), rng.randint(1, 70000)]) for _ in range(B)]
    ok, t, m = compare(lens)
    bad += not ok
    if not ok:
        print("MISMATCH", lens[:10], t["C"], m.C)
print("mismatches:", bad)
