"""Calibration: fit (latency scale s, HBM bandwidth bw, offset) on the 9 measured BF16 totals; latency constants
from the traces x s (trace builds run ~10% slower than default builds)."""
import itertools, math, sys
from dataclasses import replace
import plan_model as pm, time_model as tm, fit

LAT = ["t_start", "t_bysm", "t_tile", "t_pre", "t_epi", "t_hs", "t_round", "t_m_entry", "t_m_store_final",
       "t_m_store_arrive", "t_round_extra16"]
BASE = replace(tm.Params(), t_epi=1.3, t_round=1.05)


def scaled(p, s):
    return replace(p, **{k: getattr(p, k) * s for k in LAT})


def calibrate(base=BASE, names=None, svals=None, bwvals=None, plans=None):
    names = names or list(fit.MEAS)
    plans = plans or fit.PLANS
    svals = svals or [0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0]
    bwvals = bwvals or [x * 1e5 for x in range(38, 46)]
    best = None
    for s, bw in itertools.product(svals, bwvals):
        prm = replace(scaled(base, s), bw=bw, offset=0.0)
        raw = {n: tm.simulate(plans[n], prm) for n in names}
        off = sum(fit.MEAS[n] - raw[n] for n in names) / len(names)
        sse = sum((fit.MEAS[n] - raw[n] - off) ** 2 for n in names)
        if best is None or sse < best[0]:
            best = (sse, replace(prm, offset=off), s)
    return best[1], best[2], math.sqrt(best[0] / len(names))


if __name__ == "__main__":
    for label, b in [("no jitter", BASE),
                     ("jitter", replace(BASE, j_start=1.0, j_bw=0.05, seeds=8))]:
        prm, s, rms = calibrate(b)
        pr = {n: tm.simulate(fit.PLANS[n], prm) for n in fit.MEAS}
        print(label, f"s={s} bw={prm.bw/1e6:.2f} TB/s offset={prm.offset:.2f} rms={rms:.2f}")
        print("   ", {n: round(pr[n] - fit.MEAS[n], 2) for n in fit.MEAS})
