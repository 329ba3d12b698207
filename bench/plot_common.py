"""What the benchmark plots share (no torch: plots are redrawn from committed JSON on any machine)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def finish(fig, plt, data: dict, json_path: Path, caption: str, rect=None) -> Path:
    """Title the figure with `caption` and the run's commit, save it as <json stem>.png beside the JSON."""
    commit = data.get("commit") or "unknown commit"
    fig.suptitle(f"{caption}; {commit[:12]}", fontsize=9)
    if rect is None:
        fig.tight_layout()
    else:
        fig.tight_layout(rect=rect)
    out = Path(json_path).with_suffix(".png")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(plot: Callable[[str], Path], module: str, argv=None) -> int:
    """`python -m bench.<module> PATH.json`: draw and say where the PNG went."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit(f"usage: python -m bench.{module} PATH/{module.removeprefix('plot_')}.json")
    print(f"wrote {plot(argv[0])}")
    return 0


def best_read_us(rows_us, sum_us):
    """The same-bytes read time a row's ratios use: the faster of the row-wise read and torch.sum. (Session 25,
    H200: with its rows sized to fill the GPU the row-wise read was the faster at all 18 decode points; with 8 KB
    rows, run 5, torch.sum won at the 4.4 MB point.)"""
    times = [t for t in (rows_us, sum_us) if t]
    return min(times) if times else None
