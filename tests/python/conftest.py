"""Shared pytest setup: GPU tests run only on a Hopper (sm_90) GPU and say why they skip otherwise."""
import pytest
import torch


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (GPU tests run on an sm_90 Hopper GPU: scripts/gpu_round.sh)"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"needs an sm_90 Hopper GPU, found compute capability {cap[0]}.{cap[1]}"
    return None


GPU_SKIP_REASON = _gpu_skip_reason()


def pytest_collection_modifyitems(config, items):
    if GPU_SKIP_REASON is None:
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
