"""CPU tests of the benchmark tooling that decisions rest on: the A/B report's ratios and its copy control."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: the `bench` package

from bench import ab_report, ab_rounds  # noqa: E402


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


def _dec(scenario: str, dtype: str, us: float, ok: bool = True) -> dict:
    return {"scenario": scenario, "dtype": dtype, "impl": "hopperkit", "us": us, "ok": ok}


def _write_rounds(tmp: Path, name: str, rounds: list[list[dict]]) -> None:
    for i, rows in enumerate(rounds, 1):
        (tmp / f"{name}_{i}.json").write_text(json.dumps({"commit": f"c+{name}", "rows": rows}))


def test_ab_rounds_medians_ratios_and_exclusions(tmp_path, capsys):
    """Per point, each build's median over its rounds; ratios to the baseline's median; a point wrong in a round
    of the build or of the baseline, or missing from one of their rounds, stays out of the geomean; peers' rows
    are not points."""
    a = [[_dec("u512", "fp8", 9.0), _dec("one_64k", "fp8", 15.0), _dec("skewed", "fp8", 10.0)],
         [_dec("u512", "fp8", 9.2), _dec("one_64k", "fp8", 15.2), _dec("skewed", "fp8", 10.1)],
         [_dec("u512", "fp8", 30.0), _dec("one_64k", "fp8", 14.9), _dec("skewed", "fp8", 10.2),
          _dec("two_32k", "fp8", 21.0)]]  # an outlier; a point only this round has
    s = [[_dec("u512", "fp8", 9.3), _dec("one_64k", "fp8", 16.0), _dec("skewed", "fp8", 1.0, ok=False),
          _dec("two_32k", "fp8", 22.0)],
         [_dec("u512", "fp8", 9.1), _dec("one_64k", "fp8", 16.2), _dec("two_32k", "fp8", 22.0)],
         [_dec("u512", "fp8", 9.2), _dec("one_64k", "fp8", 15.8), _dec("skewed", "fp8", 11.0),
          _dec("two_32k", "fp8", 22.0), {"scenario": "u512", "dtype": "fp8", "impl": "flashinfer", "us": 99.0}]]
    _write_rounds(tmp_path, "a", a)
    _write_rounds(tmp_path, "s", s)
    (tmp_path / "tests_s.log").write_text("....\n26 passed in 30.1s\n")
    out = tmp_path / "r.json"
    assert ab_rounds.main([str(tmp_path), str(out), "3", "a", "s"]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert all(p["impl"] == "hopperkit" for p in data["points"])
    pts = {p["scenario"]: p for p in data["points"]}
    assert pts["u512"]["a"]["median_us"] == 9.2 and pts["u512"]["s"]["median_us"] == 9.2  # the outlier is out
    assert pts["one_64k"]["s"]["median_us"] == 16.0 and pts["one_64k"]["s"]["rounds"] == 3
    assert pts["skewed"]["s"]["rounds"] == 2 and pts["skewed"]["ok"] is False
    assert pts["two_32k"]["a"]["rounds"] == 1 and pts["two_32k"]["s"]["ratio"] == 22.0 / 21.0
    g = (9.2 / 9.2 * 16.0 / 15.0) ** 0.5
    summ = data["summary"]["s"]
    assert summ["points"] == 2 and abs(summ["geomean"] - g) < 1e-12 and summ["max"] == 16.0 / 15.0
    assert f"geomean {g:.4f}" in text and "WRONG OR MISSING" in text
    assert data["tests"]["s"] == "26 passed in 30.1s" and data["tests"]["a"] is None
    assert data["commits"] == {"a": ["c+a"], "s": ["c+s"]}


def test_ab_rounds_a_broken_build_leaves_the_others_alone(tmp_path):
    """With three builds, one whose output is wrong everywhere does not take points from another's geomean."""
    _write_rounds(tmp_path, "a", [[_dec("x", "fp8", 10.0), _dec("y", "fp8", 20.0)]] * 2)
    _write_rounds(tmp_path, "s", [[_dec("x", "fp8", 11.0), _dec("y", "fp8", 22.0)]] * 2)
    _write_rounds(tmp_path, "t", [[_dec("x", "fp8", 1.0, ok=False), _dec("y", "fp8", 2.0, ok=False)]] * 2)
    out = tmp_path / "r.json"
    assert ab_rounds.main([str(tmp_path), str(out), "2", "a", "s", "t"]) == 0
    summ = json.loads(out.read_text())["summary"]
    assert summ["s"]["points"] == 2 and abs(summ["s"]["geomean"] - 1.1) < 1e-12
    assert summ["t"]["points"] == 0


def test_cross_ab_script_rejects_bad_arguments(tmp_path):
    """scripts/cross_ab.sh checks its arguments (paths relative to the caller) before it builds or creates
    anything: exit 2 and its usage line."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    script = root / "scripts" / "cross_ab.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    patch = tmp_path / "p.patch"
    patch.write_text("")
    out = tmp_path / "out"
    cases = {(): "usage", ("--patch", "a=p.patch", "--", "decode_bench"): "not a",
             ("--patch", "s=no_such.patch", "--", "x"): "no patch file", ("--patch", "s=p.patch"): "usage",
             ("--patch",): "needs a value", ("--patch", "s=p.patch", "--rounds"): "needs a value",
             ("--rounds", "0", "--patch", "s=p.patch", "--", "x"): "positive count",
             ("--patch", "s=p.patch", "--patch", "s=p.patch", "--", "x"): "twice", ("--bogus",): "unknown argument"}
    for args, why in cases.items():
        r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "HOPPERKIT_GIT_HASH": "test", "OUT": str(out)})
        assert r.returncode == 2 and why in r.stdout and "usage:" in r.stdout, (args, r.stdout, r.stderr)
    assert not out.exists()


def test_trace_ab_script_rejects_bad_arguments(tmp_path):
    """scripts/trace_ab.sh (decode traces of this tree and a patch) checks its arguments, relative to the caller,
    before it builds or creates anything: exit 2 and why."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    script = root / "scripts" / "trace_ab.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    out = tmp_path / "out"
    for args, why in {(): "usage:", ("no_such.patch",): "no patch file"}.items():
        r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "OUT": str(out)})
        assert r.returncode == 2 and why in r.stdout, (args, r.stdout, r.stderr)
    assert not out.exists()


def test_env_ab_rounds_script_rejects_bad_arguments(tmp_path):
    """scripts/env_ab_rounds.sh checks its arguments before it runs or creates anything: exit 2 and why."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    script = root / "scripts" / "env_ab_rounds.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    out = tmp_path / "out"
    ok_a, ok_b = "a=HOPPERKIT_AB_BASELINE=1", "b=HOPPERKIT_PROLOGUE_KERNEL=pair HOPPERKIT_PROLOGUE_ORDER=blocked"
    cases = {(): "two configurations", ("prologue_bench", "", "2", ok_a): "two configurations",
             ("prologue_bench", "", "0", ok_a, ok_b): "positive count",
             ("prologue_bench", "", "x", ok_a, ok_b): "positive count",
             ("no_such_bench", "", "2", ok_a, ok_b): "no benchmark",
             ("prologue_bench", "", "2", ok_a, "b:HOPPERKIT_X=1"): "not NAME=ENV=VALUE",
             ("prologue_bench", "", "2", ok_a, "a=HOPPERKIT_X=1"): "named twice"}
    for args, why in cases.items():
        r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "OUT": str(out)})
        assert r.returncode == 2 and why in r.stdout and "usage:" in r.stdout, (args, r.stdout, r.stderr)
    assert not out.exists()


def test_sass_digest_waits_regions_and_top(tmp_path):
    """The stall-profile digest: a wait's samples are found on the first instruction that uses its predicate
    (other instructions may sit between), regions split by address, shares over all samples."""
    from bench import sass_digest
    cols = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
            "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]
    rows = [
        ("0x100", "SYNCS.PHASECHK.TRANS64.TRYWAIT P4, [R19+URZ], R12", 1, 64, 0, 1),
        ("0x110", "IMAD.IADD R2, R7, 0x1, -R2", 2, 64, 0, 2),
        ("0x120", "@P4   BRA 0x200", 50, 64, 50, 0),            # the consumers' wait lands here
        ("0x130", "QGMMA.64x32x32.F32.E4M3.E4M3 R40, gdesc[UR8], RZ, !UPT", 7, 64, 0, 7),
        ("0x200", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R66+URZ], R47", 0, 16, 0, 0),
        ("0x210", "@P0   BRA 0x230", 10, 16, 10, 0),
        ("0x220", "LDGSTS.E.BYPASS.128 desc[UR6][R58.64], P0, [R47]", 30, 128, 0, 30),
    ]
    lines = ['"==PROF== preamble"', ",".join(f'"{c}"' for c in cols)]
    lines += [",".join(f'"{v}"' for v in (a, s, n, x, ls, w, 0)) for a, s, n, x, ls, w in rows]
    path = tmp_path / "sass.csv"
    path.write_text("\n".join(lines) + "\n")
    cols_read, body = sass_digest.load(str(path))
    d = sass_digest.digest(cols_read, body, splits=[0x200], top=2)
    assert d["samples"] == 100 and d["instructions"] == 7
    assert [t["address"] for t in d["top"]] == ["0x120", "0x220"] and d["top"][0]["pct"] == 50.0
    w0, w1 = d["barrier_waits"]
    assert (w0["address"], w0["use_pct"], w0["executed"]) == ("0x100", 50.0, 64)
    assert (w1["address"], w1["use_pct"]) == ("0x200", 10.0)
    r0, r1 = d["regions"]
    assert (r0["pct"], r0["warp_instructions"]) == (60.0, 256) and (r1["pct"], r1["warp_instructions"]) == (40.0, 160)
    assert r1["stall_reasons_pct"] == {"wait": 75.0, "long_sb": 25.0}
    assert sass_digest.main([str(path), "--top", "1", "--split", "0x200"]) == 0
    out = tmp_path / "d.json"
    assert sass_digest.main([str(path), "--split", "+0x100", "--json", str(out)]) == 0  # 0x100 + 0x100
    assert [g["pct"] for g in json.loads(out.read_text())["regions"]] == [60.0, 40.0]
    (tmp_path / "bad.csv").write_text("no table here\n")
    assert sass_digest.main([str(tmp_path / "bad.csv")]) == 1


def test_decode_report_same_bytes_read_column():
    """The decode table shows the same-bytes plain read's and torch.sum's times and hopperkit's time over the
    plain read, per scenario."""
    from bench import decode_bench
    rows = [{"scenario": "s1", "dtype": "fp8", "impl": "hopperkit", "us": 30.0, "floor_us": 15.0, "ok": True,
             "same_bytes_read_us": 20.0, "same_bytes_sum_us": 24.0},
            {"scenario": "s1", "dtype": "fp8", "impl": "flashinfer", "us": 45.0, "floor_us": 15.0, "ok": True,
             "same_bytes_read_us": 20.0, "same_bytes_sum_us": 24.0},
            {"scenario": "s2", "dtype": "bf16", "impl": "hopperkit", "us": 12.0, "floor_us": 4.0, "ok": True},
            {"scenario": "s3", "dtype": "bf16", "impl": "hopperkit", "us": 12.0, "floor_us": 4.0, "ok": True,
             "same_bytes_read_us": 10.0, "same_bytes_sum_us": 8.0}]
    text = decode_bench.report(rows, ["hopperkit", "flashinfer"])
    header = next(line for line in text.splitlines() if line.lstrip().startswith("scenario"))
    assert "read" in header.split() and "sum" in header.split() and "hk/read" in header.split()
    s1 = next(line.split() for line in text.splitlines() if line.lstrip().startswith("s1"))
    # columns: scenario dtype floor read sum hk hk/fl fi fi/fl hk/read fi/hk (fi/hk is 1.50 too: by position)
    assert s1 == ["s1", "fp8", "15.00", "20.00", "24.00", "30.00", "2.00", "45.00", "3.00", "1.50", "1.50"]
    s2 = next(line.split() for line in text.splitlines() if line.lstrip().startswith("s2"))
    assert s2[3] == "-" and s2[4] == "-" and s2[9] == "-"  # no read time measured: no ratio either
    s3 = next(line.split() for line in text.splitlines() if line.lstrip().startswith("s3"))
    assert s3[3:5] == ["8.00", "8.00"] and s3[9] == "1.50"  # torch.sum faster here: read and hk/read use it


def test_read_kernel_kind_is_checked():
    """read_kernel_us names the read kernels it knows; anything else is a ValueError before any GPU work."""
    from bench import common
    with pytest.raises(ValueError, match="kind"):
        common.read_kernel_us(1 << 20, kind="copy")


def test_read_row_length_gives_every_sm_rows():
    """The row-wise read shortens its rows for small reads so that every SM gets rows (64 per SM), within
    256..4096 elements."""
    from bench import common
    assert common.read_row_elems(1 << 30, 132) == 4096          # 2 GiB: long rows
    assert common.read_row_elems(8_400_000, 132) == 512          # the 16.8 MB scenario: 16k rows
    assert common.read_row_elems(2_200_000, 132) == 256          # 4.4 MB: as short as allowed
    assert common.read_row_elems(10, 132) == 256
    for n in (2_200_000, 8_400_000, 67_000_000):
        row = common.read_row_elems(n, 132)
        assert row == 256 or n // row >= 64 * 132


def test_moe_stage_bytes_and_read_target_counts():
    """The MoE floor's bytes split into the gate-up's and the down's streams (their sum is the floor's bytes, for
    both scalings); the target count compares each case with 1.25 x its floor and the report shows the reads."""
    from bench import moe_bench as mb
    shape = mb.Shape(model="m", mode="tp8_ep1", experts=8, e_local=8, top_k=2, hidden=512, inter=256)
    for scaling in ("per_tensor", "block"):
        gate, down = mb.stage_bytes(shape, scaling, bs=4, touched=3)
        assert gate + down == 3 * mb.expert_bytes(shape, scaling) + 2 * 4 * 512 * 2
        assert gate > down  # w13 holds two weight rows per intermediate column, w2 one
    fl = mb.floors(shape, "block", 4, 8, 3, {"read_TBps": 4.0, "fp8_dense_TFLOPs": 1000.0})
    assert fl["bytes"] == sum(mb.stage_bytes(shape, "block", 4, 3))

    def row(bs, us, floor, r1=None, r2=None, impl="hopperkit"):
        r = {"model": "m", "mode": "tp8_ep1", "scaling": "block", "bs": bs, "impl": impl, "us": us,
             "floor_us": floor, "ok": True}
        if r1 is not None:
            r.update(same_bytes_read_us=r1, two_launch_read_us=r2)
        return r
    rows = [row(4, 12.0, 10.0, 11.0, 14.0), row(8, 13.0, 10.0, 13.0, 15.0), row(16, 20.0, 10.0),
            row(4096, 10.0, 10.0), row(4, 1.0, 10.0, impl="torch_grouped")]
    t = mb.target_counts(rows)
    assert t["cases"] == 3 and t["hopperkit_within"] == 1             # bs 4096 and the peer's row do not count
    assert t["read_cases"] == 2 and t["one_launch_read_within"] == 1 and t["two_launch_read_within"] == 0
    assert t["hopperkit_within_where_read"] == 1
    assert "in two launches 0" in mb.target_text(t)
    text = mb.report(rows, ["hopperkit", "torch_grouped"])
    bs4 = next(line.split() for line in text.splitlines() if line.split()[:4] == ["m", "tp8_ep1", "block", "4"])
    assert bs4[-3:] == ["11.0", "14.0", "0.86"]                        # read1, read2, hopperkit / read2


def test_moe_trace_prep_events_relative_and_stale():
    """scripts/moe_trace.py: kernel 1's events (src/moe/trace.h's prep row) in µs from the gate-up grid's first CTA
    entry, the ones never written None, and the ones an earlier call left (a bound prep kernel or an FP8 input writes
    none) None rather than a time thousands of µs before the call."""
    import importlib.util
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("moe_trace", root / "scripts" / "moe_trace.py")
    mt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mt)
    t0 = 5_000_000_000  # ns
    gate_up = [[0] * mt.SLOTS for _ in range(3)]
    gate_up[0][mt.ENTRY], gate_up[1][mt.ENTRY] = t0 + 200, t0  # the first entry is the smallest, not row 0's
    prep = [0] * mt.SLOTS
    ev = dict(mt.PREP_EVENTS)
    prep[ev["index_entry"]] = t0 - 500
    prep[ev["index_done"]] = t0 + 4_300
    prep[ev["quant_last_done"]] = t0 - 20_000_000  # 20 ms before: an earlier call's
    out = mt.analyse_prep(prep, {"gate_up": gate_up, "down": []})
    assert out["index_entry"] == -0.5 and out["index_done"] == 4.3
    assert out["quant_last_done"] is None and out["index_counted"] is None
    assert set(out) == set(ev)
    assert mt.analyse_prep(None, {"gate_up": gate_up}) == {}
    assert mt.analyse_prep(prep, {"gate_up": [[0] * mt.SLOTS]}) == {}  # no gate-up CTA entered


def test_profile_plan_parses_scenario_lengths():
    """bench.profile_plan reads lengths as decode_scenarios.json spells them; anything else is a ValueError."""
    from bench.profile_plan import parse_lens
    assert parse_lens("2x3") == [3, 3]
    assert parse_lens("1x65536+15x4096") == [65536] + [4096] * 15
    for bad in ("256", "0x5", "x4", "2x-1"):
        with pytest.raises(ValueError, match="--lens"):
            parse_lens(bad)


def test_vllm_attention_shapes_as_decode_scenarios():
    """decode_bench --shapes vllm: the grammar of vLLM's attention benchmark ([count]q<len>[s<kv>], k = x1024),
    its decode and spec-decode shapes as 64 / 8-head scenarios (prefill, extend and mixed batches left out), and
    the reference's causal mask for q_len > 1 checked against SDPA on a small spec-decode case (CPU)."""
    from bench import decode_bench
    assert decode_bench.parse_vllm_shape("8q1s1k") == (8, 1, 1024)
    assert decode_bench.parse_vllm_shape("16q4s2k") == (16, 4, 2048)
    assert decode_bench.parse_vllm_shape("q512") == (1, 512, 512)
    assert decode_bench.parse_vllm_shape("q1ks2k") == (1, 1024, 2048)
    assert decode_bench.parse_vllm_shape("2q2k_8q1s1k") is None
    path = decode_bench.find_scenarios(None).with_name("attention_shapes.json")
    scns = decode_bench.load_vllm_shapes(path)
    data = json.loads(path.read_text())
    assert set(scns) == set(data["decode"]) | set(data["spec_decode"])
    for spec, cfg in scns.items():
        count, q_len, kv = decode_bench.parse_vllm_shape(spec)
        assert cfg["lens"] == [kv] * count and cfg["q_len"] == q_len
        assert (cfg["num_q_heads"], cfg["num_kv_heads"], cfg["head_dim"]) == (64, 8, 128)
    cfg = decode_bench.DEFAULTS | {"num_q_heads": 8, "num_kv_heads": 2, "lens": [70, 5, 130], "q_len": 4}
    case = decode_bench.build_case("tiny", cfg, "bf16", 1, "cpu")
    assert case.q.shape == (12, 8, 128)
    assert decode_bench.self_check(case).startswith("ok")


def _collected(env_shard: str | None) -> tuple[int, list[str]]:
    """Exit status and the test ids `pytest --collect-only` lists for test_cpu.py under HK_TEST_SHARD."""
    import os
    import subprocess
    env = dict(os.environ)
    env.pop("HK_TEST_SHARD", None)
    if env_shard is not None:
        env["HK_TEST_SHARD"] = env_shard
    here = Path(__file__).resolve().parent
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        str(here / "test_cpu.py")], capture_output=True, text=True, env=env, cwd=here.parents[1])
    return r.returncode, [ln for ln in r.stdout.splitlines() if "::" in ln]


def test_test_shards_partition_the_suite():
    rc, full = _collected(None)
    assert rc == 0 and len(full) >= 4
    rc1, s1 = _collected("1/3")
    rc2, s2 = _collected("2/3")
    rc3, s3 = _collected("3/3")
    assert (rc1, rc2, rc3) == (0, 0, 0)
    assert all(s for s in (s1, s2, s3)), "every shard gets tests"
    assert sorted(s1 + s2 + s3) == sorted(full), "the shards together are the suite, each test once"
    rc, _ = _collected("3/2")
    assert rc != 0, "HK_TEST_SHARD past its count must be refused"
    # the shard is taken out of the environment, so that tests that start pytest processes get their whole selection
    here = Path(__file__).resolve().parent
    import subprocess
    r = subprocess.run([sys.executable, "-c", "import os; os.environ['HK_TEST_SHARD'] = '1/2'; import conftest; "
                        "assert conftest.TEST_SHARD == '1/2' and 'HK_TEST_SHARD' not in os.environ"], cwd=here,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    from conftest import shard_of
    assert shard_of("2/5") == (2, 5)
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(pytest.UsageError, match="HK_TEST_SHARD"):
            shard_of(bad)
