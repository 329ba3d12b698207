"""Plot a decode_bench JSON: per dtype, grouped bars of time / HBM floor per scenario and impl.

    python -m bench.plot_decode bench/results/h200/decode.json      # writes decode.png beside the JSON

Bars of rows whose output was wrong ("ok": false) are hatched; skipped impls leave a gap. The dashed line is
the 1.25 x floor target; black ticks (where the JSON has them) mark the same-bytes read kernel's time / floor,
i.e. what a plain read of the scenario's KV bytes takes with launch, ramp and tail.
"""
from __future__ import annotations

import json
from pathlib import Path

from bench import plot_common
from bench.plot_common import best_read_us

TARGET = 1.25


def plot(json_path: str | Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    json_path = Path(json_path)
    data = json.loads(json_path.read_text())
    rows = [r for r in data["rows"] if r.get("floor_us")]          # attention rows (plan rows have no floor)
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    if not rows:
        raise SystemExit(f"{json_path}: no rows with a floor to plot")
    by = {(r["scenario"], r["dtype"], r["impl"]): r for r in rows}
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(max(9.0, 1.3 * len(scenarios) + 2.5), 4.2 * len(dtypes)),
                             squeeze=False)
    width = 0.8 / max(1, len(impls))
    for ax, dt in zip(axes[:, 0], dtypes):
        missing, lowest = [], TARGET
        for j, impl in enumerate(impls):
            xs, ys, hatches = [], [], []
            for i, scn in enumerate(scenarios):
                r = by.get((scn, dt, impl))
                if r and r.get("us"):
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(r["us"] / r["floor_us"])
                    hatches.append("//" if r.get("ok") is False else "")
            if not xs:
                missing.append(impl)
                continue
            lowest = min(lowest, *ys)
            bars = ax.bar(xs, ys, width, label=impl, color=f"C{j}", edgecolor="k", linewidth=0.4)
            for bar, hatch in zip(bars, hatches):
                bar.set_hatch(hatch)
            ax.bar_label(bars, fmt="%.2f", fontsize=6)
        read_of = {(r["scenario"], r["dtype"]): best_read_us(r.get("same_bytes_read_us"), r.get("same_bytes_sum_us"))
                   / r["floor_us"] for r in rows if r.get("same_bytes_read_us") or r.get("same_bytes_sum_us")}
        reads = [(i, read_of[(scn, dt)]) for i, scn in enumerate(scenarios) if (scn, dt) in read_of]
        if reads:
            ax.hlines([y for _, y in reads], [i - 0.45 for i, _ in reads], [i + 0.45 for i, _ in reads],
                      colors="k", linewidth=1.5, label="same-bytes read (row-wise or torch.sum, faster)")
            lowest = min(lowest, *(y for _, y in reads))
        ax.axhline(TARGET, color="k", linestyle="--", linewidth=1, label=f"target {TARGET} x floor")
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.8 * min(1.0, lowest))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xticks(range(len(scenarios)), scenarios, rotation=20, ha="right")
        ax.set_ylabel("time / HBM floor")
        ax.set_title(f"decode attention, {dt} KV: time / floor (lower is better) - {data.get('device', '?')}")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        if missing:
            ax.text(1.01, 0.0, "no data:\n" + "\n".join(missing), transform=ax.transAxes, fontsize=8,
                    va="bottom")
    ceil = data.get("ceilings", {})
    return plot_common.finish(fig, plt, data, json_path, (f"floor = KV bytes / {ceil.get('read_TBps', '?')} TB/s measured read bandwidth; "
                                f"hatched = wrong output"))


def main(argv=None) -> int:
    return plot_common.main(plot, "plot_decode", argv)


if __name__ == "__main__":
    raise SystemExit(main())
