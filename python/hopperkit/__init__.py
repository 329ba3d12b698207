"""hopperkit: fast LLM-serving operators for NVIDIA Hopper GPUs (sm_90a: H100, H200, H20).

Python API on torch tensors; every operator is a torch custom op (``torch.ops.hopperkit.*``) that runs on the
current CUDA stream, works under torch.compile and CUDA-graph capture, and calls the framework-free C++ core.
"""
from __future__ import annotations

from ._core import build_info
from .decode import DecodePlan, decode_attention, quantize_query_fp8
from .prologue import attention_prologue
from .moe import fused_moe, moe_workspace, moe_workspace_bytes
from .errors import (AlignmentError, CudaError, DeviceError, DtypeError, HopperkitError, InvalidValueError,
                     PlanError, ShapeError, StrideError, UnsupportedError)

__version__ = build_info()["version"]

__all__ = [
    "DecodePlan", "decode_attention", "quantize_query_fp8", "attention_prologue", "fused_moe",
    "moe_workspace", "moe_workspace_bytes", "build_info",
    "HopperkitError", "ShapeError", "DtypeError", "DeviceError", "StrideError", "AlignmentError",
    "InvalidValueError", "UnsupportedError", "CudaError", "PlanError",
]
