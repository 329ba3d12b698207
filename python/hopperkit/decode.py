"""Paged decode attention with a per-step, device-side, load-balanced plan.

Typical use, once per decode step and then in every layer::

    plan = hopperkit.DecodePlan(max_batch=256, num_q_heads=8, num_kv_heads=1, kv_dtype=torch.bfloat16)
    plan.update(seq_lens, block_size=64, max_blocks_per_seq=block_table.shape[1])   # once per step
    for layer in layers:
        out = hopperkit.decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan)

Reuse contract: a plan serves every layer of the step for which ``update`` was called, on the same stream,
while ``seq_lens``, the batch size and the block size stay unchanged; calls sharing one plan must not overlap
in time (they share its merge counters and partial buffers). Under CUDA graphs capture ``plan.update`` in the
same graph, before the first layer. A stale plan is detected on the device: the affected outputs are NaN and
``plan.check()`` raises PlanError.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import _core
from ._core import _C
from .errors import DeviceError, DtypeError, InvalidValueError, PlanError, ShapeError

_KV_DTYPES = {torch.bfloat16: _C.DTYPE_BF16, torch.float8_e4m3fn: _C.DTYPE_FP8E4M3}
_MODES = {"dynamic": 0, "static": 1}
_FP8_MAX = 448.0


def _dtype_code(t: torch.Tensor, arg: str) -> int:
    code = _KV_DTYPES.get(t.dtype)
    if code is None:
        raise DtypeError(arg, "bfloat16 or float8_e4m3fn", str(t.dtype).replace("torch.", ""))
    return code


def _as_dlpack(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """FP8 tensors cross DLPack as uint8 views (their dtype travels separately)."""
    if t is None:
        return None
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _check_cuda(device: torch.device, **tensors: Optional[torch.Tensor]) -> None:
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise InvalidValueError(name, "a torch.Tensor", type(t).__name__)
        if t.device != device:
            raise DeviceError(name, f"a tensor on {device}", str(t.device))


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


# ---- torch custom ops ---------------------------------------------------------------------------------------

@torch.library.custom_op("hopperkit::decode_plan", mutates_args=("workspace",), device_types="cuda")
def _decode_plan_op(workspace: torch.Tensor, seq_lens: torch.Tensor, cfg: list[int], block_size: int,
                    max_blocks_per_seq: int, max_seq_len: int) -> None:
    with torch.cuda.device(workspace.device):
        _core.call("plan_update", cfg, workspace, seq_lens, block_size, max_blocks_per_seq, max_seq_len,
                   _stream(workspace.device))


@_decode_plan_op.register_fake
def _(workspace, seq_lens, cfg, block_size, max_blocks_per_seq, max_seq_len) -> None:
    return None


@torch.library.custom_op("hopperkit::decode_attention", mutates_args=("workspace", "out", "lse"),
                         device_types="cuda")
def _decode_attention_op(q: torch.Tensor, q_scale: Optional[torch.Tensor], k_cache: torch.Tensor,
                         v_cache: torch.Tensor, k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
                         block_table: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: Optional[torch.Tensor],
                         workspace: torch.Tensor, out: torch.Tensor, lse: Optional[torch.Tensor], cfg: list[int],
                         max_q_len: int, softmax_scale: float) -> None:
    with torch.cuda.device(q.device):
        _core.call("decode_attention", _as_dlpack(q), _dtype_code(q, "q"), q_scale, _as_dlpack(k_cache),
                   _as_dlpack(v_cache), _dtype_code(k_cache, "k_cache"), k_scale, v_scale, block_table, seq_lens,
                   query_start_loc, workspace, out, lse, cfg, max_q_len, softmax_scale, _stream(q.device))


@_decode_attention_op.register_fake
def _(q, q_scale, k_cache, v_cache, k_scale, v_scale, block_table, seq_lens, query_start_loc, workspace, out, lse,
      cfg, max_q_len, softmax_scale) -> None:
    return None


# ---- the plan ----------------------------------------------------------------------------------------------

class DecodePlan:
    """The schedule of one decode step: which CTA reads which 64-token tiles of which (request, KV head).

    Sized once (``max_batch``, heads, KV dtype, ``max_q_len``); ``update`` recomputes it on the GPU for each
    step's ``seq_lens`` without synchronising. ``mode="static"`` gives the classic fixed split-KV schedule
    (kept as the benchmark baseline; needs ``max_seq_len``).
    """

    def __init__(self, max_batch: int, num_q_heads: int, num_kv_heads: int, *,
                 kv_dtype: torch.dtype = torch.bfloat16, max_q_len: int = 1, mode: str = "dynamic",
                 device=None):
        if mode not in _MODES:
            raise InvalidValueError("mode", "'dynamic' or 'static'", repr(mode))
        if kv_dtype not in _KV_DTYPES:
            raise DtypeError("kv_dtype", "bfloat16 or float8_e4m3fn", str(kv_dtype).replace("torch.", ""))
        device = torch.device(device if device is not None else "cuda")
        if device.type != "cuda":
            raise DeviceError("device", "a CUDA device", str(device))
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.kv_dtype = kv_dtype
        self.mode = mode
        self.max_batch, self.num_q_heads, self.num_kv_heads, self.max_q_len = (
            max_batch, num_q_heads, num_kv_heads, max_q_len)
        self._base_cfg = _core.call("make_config", max_batch, num_q_heads, num_kv_heads, _KV_DTYPES[kv_dtype],
                                    max_q_len, _MODES[mode], device.index, 0)
        self.workspace = torch.zeros(_core.call("workspace_bytes", self._base_cfg), dtype=torch.uint8,
                                     device=device)
        self._cfg: Optional[list[int]] = None

    @property
    def sm_ctas(self) -> int:
        """Attention CTAs resident on the whole GPU (SMs x CTAs per SM) for this plan's kernel variant."""
        return self._base_cfg[7]

    @property
    def cfg(self) -> list[int]:
        if self._cfg is None:
            raise PlanError("plan", "a plan updated for this step (call plan.update(seq_lens, ...))", "no update")
        return self._cfg

    def update(self, seq_lens: torch.Tensor, *, block_size: int, max_blocks_per_seq: int,
               max_seq_len: Optional[int] = None) -> "DecodePlan":
        """Enqueues the planner kernel for this step's lengths on the current stream (graph-capturable).

        ``max_seq_len``: static mode, the longest request (required). Dynamic mode, an optional upper bound on
        ``seq_lens``: at most 4544 tokens ((kSliceMinPieces - 1) x 64, heuristics.h) the attention runs its 16-row
        kernels without the sliced merge of long requests, which cannot occur then (1-2% faster on short batches, the
        same output). A bound below a length
        stays correct (slower merges). A captured CUDA graph keeps the kernels chosen at capture, so capture with a
        bound that holds for every replay, or none. An update that raises leaves the plan without a step:
        ``decode_attention`` raises ``PlanError`` with it until an update succeeds.
        """
        _check_cuda(self.device, seq_lens=seq_lens)
        if self.mode == "static" and max_seq_len is None:
            raise InvalidValueError("max_seq_len", "the longest request's length (static mode)", "None")
        msl = int(max_seq_len) if max_seq_len is not None else 0
        # An update that raises leaves no plan to run with: the workspace may still hold the previous step's plan,
        # whose batch the attention kernels would take while the caller passes this step's tensors.
        self._cfg = None
        cfg = _core.call("plan_launch_info", self._base_cfg, int(seq_lens.shape[0]) if seq_lens.dim() else -1,
                         block_size, msl)
        torch.ops.hopperkit.decode_plan(self.workspace, seq_lens, cfg, block_size, max_blocks_per_seq, msl)
        self._cfg = cfg
        return self

    def errors(self) -> int:
        """Error bits of the last update and of the attention calls since (synchronises the stream)."""
        return _core.call("plan_read_errors", self._base_cfg, self.workspace, _stream(self.device))

    def check(self) -> None:
        """Raises PlanError if the plan was found stale or its inputs were clamped (synchronises)."""
        e = self.errors()
        reasons = []
        if e & _C.PLAN_ERROR_STALE:
            reasons.append("seq_lens changed since plan.update (outputs of the affected requests are NaN)")
        if e & _C.PLAN_ERROR_SEQ_LEN_CLAMPED:
            reasons.append("a seq_len was negative or beyond block_table's capacity (clamped)")
        if e & _C.PLAN_ERROR_QUERY_LOC:
            reasons.append("query_start_loc gave a request a bad query range (its rows were skipped)")
        if e & _C.PLAN_ERROR_BLOCK_ID:
            reasons.append("a block_table entry in use was outside [0, num_blocks) (read as zeros)")
        if reasons:
            raise PlanError("plan", "no errors", "; ".join(reasons))

    # ---- introspection (tests, benchmarks) ----
    def arrays(self) -> dict:
        """The plan's arrays as int32 tensor views into the workspace (device)."""
        return _plan_arrays(self._base_cfg, self.workspace)

    def cpu_twin(self, seq_lens: list[int], *, block_size: int, max_blocks_per_seq: int,
                 max_seq_len: int = 0) -> dict:
        """The same plan computed by the CPU twin (host tensors)."""
        raw = _core.call("plan_cpu", self._base_cfg, [int(x) for x in seq_lens], block_size, max_blocks_per_seq,
                         max_seq_len)
        return _plan_arrays(self._base_cfg, torch.frombuffer(bytearray(raw), dtype=torch.uint8))


def _plan_arrays(cfg: list[int], ws: torch.Tensor) -> dict:
    lay = _core.call("plan_layout", cfg)
    max_batch, num_kv_heads, max_ctas = cfg[0], cfg[2], cfg[6]
    pairs = max_batch * num_kv_heads
    sizes = {"header": _C.PLAN_HEADER_INTS, "pair_tile_start": pairs + 1, "pair_first_slot": pairs,
             "pair_num_pieces": pairs, "cta_tile_start": max_ctas + 1, "cta_first_pair": max_ctas,
             "empty_pairs": pairs, "merge_counters": pairs, "slot_counters": 2 * max_ctas,
             "sm_claims": _C.PLAN_MAX_SM_SLOTS}
    return {k: ws[lay[k]:lay[k] + 4 * n].view(torch.int32) for k, n in sizes.items()}


# ---- the operator -------------------------------------------------------------------------------------------

def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     seq_lens: torch.Tensor, plan: DecodePlan, *, softmax_scale: Optional[float] = None,
                     q_scale: Optional[torch.Tensor] = None, k_scale: Optional[torch.Tensor] = None,
                     v_scale: Optional[torch.Tensor] = None, query_start_loc: Optional[torch.Tensor] = None,
                     max_q_len: Optional[int] = None, out: Optional[torch.Tensor] = None,
                     lse: Optional[torch.Tensor] = None, return_lse: bool = False):
    """Attention of each request's new query tokens over its paged KV cache.

    q: [num_tokens, num_q_heads, 128] bf16, or fp8 e4m3 with q_scale [num_tokens, num_q_heads] fp32 (FP8 KV).
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, 128] views (any block/token/head strides), bf16 or
        fp8 e4m3 with k_scale / v_scale (one-element fp32 tensors on the GPU).
    block_table: [batch, max_blocks_per_seq] int32; seq_lens: [batch] int32 (cached tokens, new ones included).
    query_start_loc: [batch + 1] int32, or None when every request has num_tokens / batch query tokens.
    Returns out [num_tokens, num_q_heads, 128] bf16 (and lse [num_tokens, num_q_heads] fp32, natural log, when
    return_lse or lse is given). Token rows that belong to no request are left untouched.
    """
    dev = q.device
    if dev.type != "cuda":
        raise DeviceError("q", "a CUDA tensor", str(dev))
    _check_cuda(dev, q=q, q_scale=q_scale, k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale,
                block_table=block_table, seq_lens=seq_lens, query_start_loc=query_start_loc, out=out, lse=lse)
    if plan.device != dev:
        raise DeviceError("plan", f"a plan on {dev}", str(plan.device))
    if q.dim() != 3:
        raise ShapeError("q", "[num_tokens, num_q_heads, head_dim]", f"{q.dim()}-d shape {tuple(q.shape)}")
    num_tokens = q.shape[0]
    batch = seq_lens.shape[0] if seq_lens.dim() == 1 else -1
    if max_q_len is None:
        if query_start_loc is None:
            max_q_len = num_tokens // batch if batch > 0 else 1
        else:
            max_q_len = plan.max_q_len
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=dev)
    if lse is None and return_lse:
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=dev)
    torch.ops.hopperkit.decode_attention(q, q_scale, k_cache, v_cache, k_scale, v_scale, block_table, seq_lens,
                                         query_start_loc, plan.workspace, out, lse, plan.cfg, int(max_q_len),
                                         float(softmax_scale))
    return (out, lse) if (return_lse or lse is not None) else out


def quantize_query_fp8(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token-per-head dynamic FP8 quantisation: q ~= q_fp8 * q_scale[..., None], q_scale = amax / 448."""
    if q.dim() != 3:
        raise ShapeError("q", "[num_tokens, num_heads, head_dim]", f"{q.dim()}-d shape {tuple(q.shape)}")
    qf = q.float()
    scale = qf.abs().amax(dim=-1).clamp_min(1e-12) / _FP8_MAX
    q8 = (qf / scale[..., None]).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
    return q8, scale.contiguous()
