"""CPU tests of the benchmark tooling that decisions rest on: the A/B report's ratios and its copy control."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: the `bench` package

from bench import ab_report  # noqa: E402


def _write(tmp: Path, name: str, rows: list[dict]) -> None:
    (tmp / f"{name}.json").write_text(json.dumps({"commit": name, "rows": rows}))


def _row(tokens: int, dtype: str, us: float, copy: float, ok: bool = True) -> dict:
    return {"case": "hy3_full", "tokens": tokens, "dtype": dtype, "impl": "hopperkit", "us": us, "ok": ok,
            "same_bytes_copy_us": copy}


def test_ab_report_ratios_control_and_wrong_outputs(tmp_path, capsys):
    _write(tmp_path, "baseline", [_row(4096, "bf16", 50.0, 40.0), _row(4096, "fp8", 40.0, 30.0),
                                  _row(512, "fp8", 10.0, 8.0)])
    _write(tmp_path, "v1", [_row(4096, "bf16", 55.0, 40.4), _row(4096, "fp8", 36.0, 29.7),
                            _row(512, "fp8", 1.0, 8.0, ok=False)])  # a fast wrong output must not count
    (tmp_path / "tests_v1.txt").write_text("GPU tests: 54 passed, 0 failed (0 skipped)\n")
    out = tmp_path / "r.json"
    assert ab_report.main([str(tmp_path), str(out), "prologue_bench", "baseline", "v1|a label"]) == 0
    text = capsys.readouterr().out
    g = (55.0 / 50.0 * 36.0 / 40.0) ** 0.5
    assert f"geomean {g:.3f} over the 2 with correct output" in text
    c = (40.4 / 40.0 * 29.7 / 30.0 * 1.0) ** (1 / 3)
    assert f"same-bytes copy control {c:.3f}" in text
    assert "WRONG OUTPUT" in text
    data = json.loads(out.read_text())
    assert data["baseline"] == "baseline" and data["runs"]["v1"]["label"] == "a label"
    assert data["runs"]["v1"]["tests"].startswith("GPU tests: 54 passed")
    assert len(data["runs"]["v1"]["rows"]) == 3


def test_ab_report_without_a_baseline(tmp_path, capsys):
    _write(tmp_path, "v1", [_row(4096, "bf16", 55.0, 40.4)])
    out = tmp_path / "r.json"
    assert ab_report.main([str(tmp_path), str(out), "prologue_bench", "baseline", "v1"]) == 0
    assert "no baseline rows" in capsys.readouterr().out
