"""Shared pytest setup: GPU tests run only on a Hopper (sm_90) GPU and say why they skip otherwise; one run
seed for every test module (fresh each run unless HK_TEST_SEED is set), printed in the run's summary so that a
failure can be replayed with HK_TEST_SEED=<seed>."""
import os
import random

import pytest
import torch

# before the test modules are imported: each reads HK_TEST_SEED for its RUN_SEED
os.environ.setdefault("HK_TEST_SEED", str(random.randrange(1 << 30)))
# this run's shard (shard_of below), taken out of the environment so that the pytest processes the tests start
# (subprocess_rerun.py) run their whole selection
TEST_SHARD = os.environ.pop("HK_TEST_SHARD", "")


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (GPU tests run on an sm_90 Hopper GPU: scripts/gpu_round.sh)"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"needs an sm_90 Hopper GPU, found compute capability {cap[0]}.{cap[1]}"
    return None


GPU_SKIP_REASON = _gpu_skip_reason()


def shard_of(spec: str) -> tuple[int, int]:
    """HK_TEST_SHARD="i/n" (1 <= i <= n) -> (i, n): the run keeps collected tests i-1, i-1+n, i-1+2n, ... so that
    n runs (e.g. n device calls, each under its time limit) together run every test once."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        i, n = 0, 0
    if not 1 <= i <= n:
        raise pytest.UsageError(f"HK_TEST_SHARD: expected 'i/n' with 1 <= i <= n, got {spec!r}")
    return i, n


def pytest_collection_modifyitems(config, items):
    if TEST_SHARD:
        i, n = shard_of(TEST_SHARD)
        dropped = [it for k, it in enumerate(items) if k % n != i - 1]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [it for k, it in enumerate(items) if k % n == i - 1]
    if GPU_SKIP_REASON is None:
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"HK_TEST_SEED={os.environ['HK_TEST_SEED']} (replay: HK_TEST_SEED=<seed> pytest ...)")
