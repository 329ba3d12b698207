import itertools, json, sys
from dataclasses import replace
import plan_model as pm, time_model as tm

MEAS = dict(uniform_512=11.97, uniform_4096=41.93, skewed_mix=25.10, skewed_extreme=13.51, one_64k_7x4k=22.85,
            one_64k_15x4k=26.44, one_64k_31x4k=33.41, one_128k_31x4k=42.79, two_32k_30x4k=32.97)
SC = pm.scenarios()
PLANS = {n: pm.current_plan(SC[n]) for n in MEAS}

def predict(prm, plans=PLANS):
    return {n: tm.simulate(plans[n], prm) for n in plans}

def fit(base, names=None, grid_bw=None, grid_round=None):
    """least squares over bw, t_round (grid), offset (closed form)"""
    names = names or list(MEAS)
    grid_bw = grid_bw or [x * 1e5 for x in range(36, 46)]
    grid_round = grid_round or [0.8, 0.9, 1.0, 1.1, 1.2, 1.3]
    best = None
    for bw, tr in itertools.product(grid_bw, grid_round):
        prm = replace(base, bw=bw, t_round=tr, offset=0.0)
        raw = {n: tm.simulate(PLANS[n], prm) for n in names}
        off = sum(MEAS[n] - raw[n] for n in names) / len(names)
        sse = sum((MEAS[n] - raw[n] - off) ** 2 for n in names)
        if best is None or sse < best[0]:
            best = (sse, replace(prm, offset=off))
    return best[1]

if __name__ == "__main__":
    for n, p in PLANS.items():
        print(n, p.summary())
    prm = fit(tm.Params())
    print(prm)
    pr = predict(prm)
    for n in MEAS:
        print(f"{n:16s} meas {MEAS[n]:6.2f} model {pr[n]:6.2f} err {pr[n]-MEAS[n]:+5.2f}")
    import math
    print("rms", math.sqrt(sum((pr[n]-MEAS[n])**2 for n in MEAS)/len(MEAS)))
