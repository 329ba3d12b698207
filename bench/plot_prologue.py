"""Plot a prologue_bench JSON: time / floor per impl for every (case, tokens), one panel per dtype, and a panel
per dtype for the decode-step rows when present.

    python -m bench.plot_prologue bench/results/h200/prologue.json      # writes prologue.png beside the JSON

Log scale. Bars of rows whose output was wrong ("ok": false) are hatched; skipped impls leave a gap. The dashed
segments mark the target 1 / 0.85 (85% of the measured copy bandwidth) over the groups with tokens >= 4096.
"""
from __future__ import annotations

import json
from pathlib import Path

from bench import plot_common

COPY_TARGET = 0.85
TARGET_MIN_TOKENS = 4096


def _panel(ax, rows, groups, impls, title, target_groups, matplotlib):
    by = {(r["case"], r["tokens"], r["impl"]): r for r in rows}
    width = 0.8 / max(1, len(impls))
    missing, lowest, highest = [], 1.0, 1.0
    for j, impl in enumerate(impls):
        xs, ys, hatches = [], [], []
        for i, (case, tokens) in enumerate(groups):
            r = by.get((case, tokens, impl))
            if r and r.get("us") and r.get("floor_us"):
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(r["us"] / r["floor_us"])
                hatches.append("//" if r.get("ok") is False else "")
        if not xs:
            missing.append(impl)
            continue
        lowest, highest = min(lowest, *ys), max(highest, *ys)
        bars = ax.bar(xs, ys, width, label=impl, color=f"C{j}", edgecolor="k", linewidth=0.4)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
        ax.bar_label(bars, fmt="%.2f", fontsize=5, rotation=90, padding=1)
    ax.axhline(1.0, color="0.4", linewidth=0.8)
    label = f"target {1 / COPY_TARGET:.2f} x floor ({COPY_TARGET:.0%} of copy BW)"
    for i in target_groups:
        ax.hlines(1 / COPY_TARGET, i - 0.45, i + 0.45, colors="k", linestyles="--", linewidth=1, label=label)
        label = None
    ax.set_yscale("log")
    ax.set_ylim(0.8 * min(1.0, lowest), 1.6 * highest)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g") if highest / lowest < 30
                                 else matplotlib.ticker.NullFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=6)
    ax.set_xticks(range(len(groups)), [f"{c}\n{t}" for c, t in groups], fontsize=7,
                  rotation=30 if any(c.startswith("step_") for c, _ in groups) else 0,
                  ha="right" if any(c.startswith("step_") for c, _ in groups) else "center")
    ax.set_ylabel("time / floor")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if missing:
        ax.text(1.01, 0.0, "no data:\n" + "\n".join(missing), transform=ax.transAxes, fontsize=7, va="bottom")


def plot(json_path: str | Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    json_path = Path(json_path)
    data = json.loads(json_path.read_text())
    rows = [r for r in data["rows"] if r.get("floor_us") and r.get("impl") not in (None, "-")]
    if not rows:
        raise SystemExit(f"{json_path}: no rows with a floor to plot")
    panels = []                                    # (title, rows, groups, impls, target groups)
    device = data.get("device", "?")
    for step in (False, True):
        part = [r for r in rows if str(r["case"]).startswith("step_") == step]
        for dt in dict.fromkeys(r["dtype"] for r in part):
            sub = [r for r in part if r["dtype"] == dt]
            groups = list(dict.fromkeys((r["case"], r["tokens"]) for r in sub))
            impls = list(dict.fromkeys(r["impl"] for r in sub))
            if step:
                title = (f"decode step (prologue + attention), {dt}: time / (KV bytes / read BW + prologue bytes /"
                         f" copy BW) - {device}")
                targets = []
            else:
                title = f"attention prologue, {dt}: time / (bytes moved / copy BW), lower is better - {device}"
                targets = [i for i, (_, t) in enumerate(groups) if t >= TARGET_MIN_TOKENS]
            panels.append((title, sub, groups, impls, targets))
    width = max(10.0, 0.55 * max(len(p[2]) for p in panels) + 3.0)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 4.0 * len(panels)), squeeze=False)
    for ax, (title, sub, groups, impls, targets) in zip(axes[:, 0], panels):
        _panel(ax, sub, groups, impls, title, targets, matplotlib)
    ceil = data.get("ceilings", {})
    return plot_common.finish(fig, plt, data, json_path, (f"floors from the measured copy {ceil.get('copy_TBps', '?')} TB/s and read "
                                f"{ceil.get('read_TBps', '?')} TB/s; hatched = wrong output"), rect=(0, 0, 1, 0.985))


def main(argv=None) -> int:
    return plot_common.main(plot, "plot_prologue", argv)


if __name__ == "__main__":
    raise SystemExit(main())
