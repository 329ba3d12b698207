"""Plot a moe_bench JSON: time / floor against batch size, one panel per (model, mode), a line per impl and
scaling (per-tensor solid, block-wise dashed).

    python -m bench.plot_moe bench/results/h200/moe.json      # writes moe.png beside the JSON (<name>.png)

Log-log. Points whose output was wrong ("ok": false) are circled in red; skipped impls leave no line. Each panel's
title carries the geometric-mean speedup of hopperkit over torch_grouped per scaling (the JSON's summary).
"""
from __future__ import annotations

import json
from pathlib import Path

from bench import plot_common

IMPL_COLOR = {"hopperkit": "C0", "torch_grouped": "C1", "flashinfer": "C2"}
SCALING_STYLE = {"per_tensor": "-", "block": "--"}


def _panel(ax, rows, summary, title, matplotlib):
    lowest, highest, missing = 1.0, 1.0, []
    for impl in dict.fromkeys(r["impl"] for r in rows):
        drawn = False
        for scaling in dict.fromkeys(r["scaling"] for r in rows):
            pts = sorted((r["bs"], r["us"] / r["floor_us"], r.get("ok") is False) for r in rows
                         if r["impl"] == impl and r["scaling"] == scaling and r.get("us") and r.get("floor_us"))
            if not pts:
                continue
            xs, ys, bad = zip(*pts)
            lowest, highest = min(lowest, *ys), max(highest, *ys)
            ax.plot(xs, ys, SCALING_STYLE.get(scaling, ":"), marker="o", markersize=3,
                    color=IMPL_COLOR.get(impl, "C7"), label=f"{impl} {scaling}")
            wrong = [(x, y) for x, y, b in pts if b]
            if wrong:
                ax.scatter(*zip(*wrong), s=60, facecolors="none", edgecolors="red", linewidths=1.2, zorder=5)
            drawn = True
        if not drawn:
            missing.append(impl)
    ax.axhline(1.0, color="0.4", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(0.8 * min(1.0, lowest), 1.5 * highest)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g") if highest / lowest < 30
                                 else matplotlib.ticker.NullFormatter())
    ax.tick_params(axis="both", which="both", labelsize=7)
    ax.set_xlabel("batch (tokens on this rank)", fontsize=8)
    ax.set_ylabel("time / floor", fontsize=8)
    speedups = [f"{s['scaling']} x{s['speedup_vs_torch_grouped_geomean']:.2f}" for s in summary
                if s.get("speedup_vs_torch_grouped_geomean")]
    ax.set_title(title + ("\nhopperkit vs torch_grouped (geomean): " + ", ".join(speedups) if speedups else ""),
                 fontsize=8)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="upper right")
    if missing:
        ax.text(0.01, 0.01, "no data: " + ", ".join(missing), transform=ax.transAxes, fontsize=6, va="bottom")


def plot(json_path: str | Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    json_path = Path(json_path)
    data = json.loads(json_path.read_text())
    rows = [r for r in data["rows"] if r.get("floor_us")]
    if not rows:
        raise SystemExit(f"{json_path}: no rows with a floor to plot")
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(len(models), len(modes), figsize=(6.0 * len(modes), 3.8 * len(models)), squeeze=False)
    device = data.get("device", "?")
    summary = data.get("summary") or []
    for i, model in enumerate(models):
        for j, mode in enumerate(modes):
            sub = [r for r in rows if r["model"] == model and r["mode"] == mode]
            if not sub:
                axes[i, j].set_visible(False)
                continue
            summ = [s for s in summary if s["model"] == model and s["mode"] == mode]
            _panel(axes[i, j], sub, summ, f"{model} {mode} - {device}", matplotlib)
    ceil = data.get("ceilings", {})
    return plot_common.finish(fig, plt, data, json_path, (f"fused FP8 MoE: time / max(touched weights + activations / read {ceil.get('read_TBps', '?')} "
                                f"TB/s, FP8 FLOPs / {ceil.get('fp8_dense_TFLOPs', '?')} TFLOP/s), lower is better; "
                                f"red circle = wrong output"), rect=(0, 0, 1, 0.97))


def main(argv=None) -> int:
    return plot_common.main(plot, "plot_moe", argv)


if __name__ == "__main__":
    raise SystemExit(main())
