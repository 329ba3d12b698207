"""Peer and reference: a fused FP8 MoE layer as plain PyTorch around its CUTLASS grouped FP8 GEMM
(torch._scaled_grouped_mm, row-wise scales), and the float32 yardstick of the MoE benchmark.

    TorchGroupedMoE(...)(hidden, topk_ids, topk_weights)   the timed baseline (per-tensor scaling only)
    reference(...)                                        float32, same quantisation points, written for clarity
    emulate_scaled_grouped_mm(...)                        CPU stand-in for the grouped GEMM (the dry run's checks)
    block_scaled_unsupported()                             why the block-wise variant is a skip (probed once)

The pipeline, every step on the device with static shapes and no host synchronisation (CUDA-graph capturable):
  1. routing index: local expert of each (token, k) row (expert_map; -1 = another rank's expert), a stable sort
     by local expert, int32 group ends `offs` (rows per expert padded to a multiple of PAD), and for every padded
     position the token it reads and the routing weight it carries;
  2. hidden quantised with the static a13 scale, then gathered into expert order (fp8 rows through a uint8 view);
  3. gate-up: grouped GEMM of x [M, H] (row-major) by w13^T [E, H, 2I] (a column-major view of the stored
     [E, 2I, H], no copy), row scales a13 [M], column scales w13_scale broadcast to [E, 2I]; bf16 out;
  4. silu(gate) * up in float32, quantised with the static a2 scale;
  5. down: the same GEMM by w2^T [E, I, H]; the row scale is a2 * the row's routing weight (0 on pad rows), so the
     top-k weight is applied in float32 in the GEMM's epilogue;
  6. combine: each (token, k) gathers its down row and the k rows of a token are summed (float32 accumulation,
     bf16 out). Rows routed to another rank's experts gather a reserved pad row, which is exactly zero.

Padding: the 2d x 3d grouped GEMM takes each group's start row from `offs`; every group is padded to a multiple
of PAD = 16 rows (16-byte aligned group starts whatever the kernel's alignment rule, and free: the kernel's row
tiles are multiples of 16, so no group needs an extra tile). The last group gets PAD more rows so that one pad
row (the last computed row) always exists for the non-local rows to read. The GEMM output past offs[-1] is never
read: what the kernel leaves there is undefined.

Per-tensor scaling is expressed through the row-wise kernel: a scalar per tensor broadcast to rows / columns
(the broadcasts are built once, outside the timed call, as a serving stack stores them with the weights).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bench.common import Skip

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
MIN_AMAX = 1e-10
PAD = 16
BLOCK = 128
STATIC_SCALE_HEADROOM = 1.25          # static activation scale = headroom * calibrated amax / 448


# ------------------------------------------------------------------------------------------ quantisation
# Every division below is by a tensor: CUDA turns a division by a Python number into a multiplication by its
# reciprocal, which can differ in the last bit, and an x / scale on an e4m3 rounding midpoint then changes code.
def quantize(x: torch.Tensor, scale) -> torch.Tensor:
    """x / scale in float32, saturated to +-448, cast to e4m3 (scale: a float or a tensor that broadcasts)."""
    if not isinstance(scale, torch.Tensor):
        scale = torch.tensor(scale, dtype=torch.float32, device=x.device)
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8)


def quant_dequant(x: torch.Tensor, scale: float) -> torch.Tensor:
    """float32 values of quantize(x, scale), dequantised."""
    return quantize(x, scale).float() * scale


def quant_dequant_groups(x: torch.Tensor, group: int = BLOCK) -> torch.Tensor:
    """Dynamic 1 x group quantisation of a [M, K] tensor (scale = group amax / 448), dequantised, float32."""
    g = x.float().unflatten(-1, (-1, group))
    amax = g.abs().amax(-1, keepdim=True).clamp_min(MIN_AMAX)
    scale = amax / torch.full_like(amax, FP8_MAX)
    return (quantize(g, scale).float() * scale).flatten(-2)


def dequant_weight(w: torch.Tensor, scale: torch.Tensor, block: bool) -> torch.Tensor:
    """One expert's fp8 [N, K] weight in float32: scale a 0-d / one-element tensor, or [N/128, K/128] blocks."""
    if block:
        scale = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return w.float() * scale


# ------------------------------------------------------------------------------------------- routing index
def routing_layout(topk_ids: torch.Tensor, topk_weights: torch.Tensor, local_of_global: torch.Tensor,
                   num_local: int, capacity: int):
    """Device-side routing index (module docstring, step 1).

    topk_ids [T, K] global ids; local_of_global [E_global] int64 (local id or -1). Returns
    src [capacity] int64 (token each padded position reads; 0 on pads), row_weight [capacity] float32 (0 on pads),
    offs [num_local] int32 (group ends), pos [T*K] int64 (padded position of each (token, k) row; the reserved
    zero row for rows of other ranks' experts)."""
    n = topk_ids.numel()
    dev = topk_ids.device
    local = local_of_global[topk_ids.reshape(-1).long()]
    is_local = local >= 0
    key = torch.where(is_local, local, num_local)                 # other ranks' rows sort last
    counts = torch.zeros(num_local + 1, dtype=torch.int64, device=dev).scatter_add_(0, key, torch.ones_like(key))
    padded = (counts[:num_local] + PAD - 1) // PAD * PAD
    padded[-1] += PAD                                              # room for the reserved zero row
    ends = torch.cumsum(padded, 0)
    starts_ext = torch.cat([ends - padded, ends[-1:] - 1])         # key num_local -> the zero row
    order = torch.argsort(key, stable=True)
    ks = key[order]
    first = torch.cumsum(counts, 0) - counts                      # first sorted index of each key
    rank = torch.arange(n, device=dev) - first[ks]
    pos_sorted = starts_ext[ks] + torch.where(ks < num_local, rank, 0)
    pos = torch.empty_like(order).scatter_(0, order, pos_sorted)
    token = torch.arange(n, device=dev) // topk_ids.shape[1]
    src = torch.zeros(capacity, dtype=torch.int64, device=dev).scatter_(0, pos, token)
    weight = torch.where(is_local, topk_weights.reshape(-1).float(), 0.0)
    row_weight = torch.zeros(capacity, dtype=torch.float32, device=dev).scatter_(0, pos, weight)
    return src, row_weight, ends.to(torch.int32), pos


# ----------------------------------------------------------------------------------------------- the peer
_BLOCK_PROBE: dict = {}


def block_scaled_unsupported() -> str:
    """Tries torch's grouped GEMM once with 1x128 activation / 128x128 weight block scales (the v2 API's
    BlockWise1x128 / BlockWise128x128 recipes) on a tiny problem; returns the skip reason."""
    if "why" in _BLOCK_PROBE:
        return _BLOCK_PROBE["why"]
    head = "torch_grouped block-wise: torch's grouped FP8 GEMM has no 1x128 x 128x128 block-scaled path"
    try:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        m, n, k, groups = 32, BLOCK, 2 * BLOCK, 2
        a = torch.randn(m, k, device=dev).to(FP8)
        b = torch.randn(groups, n, k, device=dev).to(FP8).transpose(1, 2)
        scale_a = torch.ones(k // BLOCK, m, device=dev).t()            # [M, K/128], outer-dim-major
        scale_b = torch.ones(groups, n // BLOCK, k // BLOCK, device=dev)
        offs = torch.tensor([16, 32], dtype=torch.int32, device=dev)
        F.scaled_grouped_mm(a, b, scale_a, F.ScalingType.BlockWise1x128, scale_b, F.ScalingType.BlockWise128x128,
                            offs=offs, output_dtype=torch.bfloat16)
        if dev == "cuda":
            torch.cuda.synchronize()
        why = f"{head} wired here (torch {torch.__version__} accepted the probe; this peer does not use it yet)"
    except Exception as e:  # noqa: BLE001 - any refusal is the reason
        why = f"{head} (torch {torch.__version__}: {type(e).__name__}: {str(e).splitlines()[0][:200]})"
    _BLOCK_PROBE["why"] = why
    return why


class TorchGroupedMoE:
    """The baseline for one set of weights. Build once (static scale broadcasts), call per batch.

    w13 [E, 2I, H], w2 [E, H, I] fp8; w13_scale / w2_scale [E] float32; a13_scale / a2_scale [1] float32;
    local_of_global [E_global] int64 on the device. grouped_mm: torch._scaled_grouped_mm, or a stand-in with its
    signature (the dry run's CPU emulation)."""

    def __init__(self, w13, w2, w13_scale, w2_scale, *, a13_scale, a2_scale, local_of_global, num_tokens: int,
                 top_k: int, block: bool = False, grouped_mm=None):
        if block:
            raise Skip(block_scaled_unsupported())
        e, two_i, h = w13.shape
        self.num_local, self.inter, self.top_k = e, two_i // 2, top_k
        self.capacity = num_tokens * top_k + PAD * (e + 1)        # >= sum of padded group sizes
        self.w13_t = w13.transpose(1, 2)                          # [E, H, 2I], column-major: no copy
        self.w2_t = w2.transpose(1, 2)                            # [E, I, H]
        self.w13_cols = w13_scale[:, None].expand(e, two_i).contiguous()
        self.w2_cols = w2_scale[:, None].expand(e, h).contiguous()
        self.a13_rows = a13_scale.expand(self.capacity).contiguous()
        self.a13, self.a2 = a13_scale, a2_scale
        self.local_of_global = local_of_global
        self.grouped_mm = grouped_mm or torch._scaled_grouped_mm

    def __call__(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        t, h = hidden.shape
        src, row_weight, offs, pos = routing_layout(topk_ids, topk_weights, self.local_of_global, self.num_local,
                                                    self.capacity)
        x = quantize(hidden, self.a13).view(torch.uint8).index_select(0, src).view(FP8)
        gate_up = self.grouped_mm(x, self.w13_t, self.a13_rows, self.w13_cols, offs=offs, out_dtype=torch.bfloat16)
        act = F.silu(gate_up[:, :self.inter].float()) * gate_up[:, self.inter:].float()
        down = self.grouped_mm(quantize(act, self.a2), self.w2_t, row_weight * self.a2, self.w2_cols, offs=offs,
                               out_dtype=torch.bfloat16)
        return down.index_select(0, pos).view(t, self.top_k, h).sum(1)


def emulate_scaled_grouped_mm(a, b, scale_a, scale_b, offs=None, out_dtype=torch.bfloat16, exact=False):
    """CPU stand-in for torch._scaled_grouped_mm, 2d x 3d case. The arguments first go through torch's own checks
    (its meta kernel: layouts, strides, scale shapes); rows past offs[-1] come back NaN, so a pipeline that reads
    them is caught. exact: float32 out instead of out_dtype (no rounding of the products), so the pipeline can be
    held to the reference at float32 precision."""
    torch._scaled_grouped_mm(a.to("meta"), b.to("meta"), scale_a.to("meta"), scale_b.to("meta"),
                             offs=offs.to("meta"), out_dtype=out_dtype)
    out = torch.full((a.shape[0], b.shape[-1]), float("nan"))
    start = 0
    for g, end in enumerate(offs.tolist()):
        acc = a[start:end].float() @ b[g].float()
        out[start:end] = acc * scale_a[start:end, None] * scale_b[g][None, :]
        start = end
    return out if exact else out.to(out_dtype)


# ------------------------------------------------------------------------------------------- reference
def reference(hidden, topk_ids, topk_weights, w13, w2, w13_scale, w2_scale, *, local_of_global, block: bool,
              a13_scale: float | None = None, a2_scale: float | None = None):
    """float32 [T, H] output and the a2 scale used.

    out[t] = sum_k w[t,k] * W2_e q2(silu(g) * u), [g, u] = W13_e q1(x_t), over the (t, k) rows whose expert e is
    local. q1 / q2: per-tensor quantisation with a13 / a2 (saturating), or dynamic 1x128 groups when block.
    Per-tensor with a2_scale None: a2 is calibrated on this batch (headroom * amax / 448), as a static scale from
    a calibration pass would be."""
    t, k = topk_ids.shape
    inter = w2.shape[2]
    xq = quant_dequant_groups(hidden) if block else quant_dequant(hidden.float(), a13_scale)
    local = local_of_global[topk_ids.reshape(-1).long()]
    acts = []
    for e in torch.unique(local[local >= 0]).tolist():
        rows = torch.nonzero(local == e).flatten()
        gate_up = xq[rows // k] @ dequant_weight(w13[e], w13_scale[e], block).T
        acts.append((e, rows, F.silu(gate_up[:, :inter]) * gate_up[:, inter:]))
    if not block and a2_scale is None:
        amax = max((float(a.abs().amax()) for _, _, a in acts), default=1.0)
        a2_scale = STATIC_SCALE_HEADROOM * max(amax, 1e-6) / FP8_MAX
    out = torch.zeros(t, hidden.shape[1], dtype=torch.float32, device=hidden.device)
    weights = topk_weights.reshape(-1).float()
    for e, rows, act in acts:
        aq = quant_dequant_groups(act) if block else quant_dequant(act, a2_scale)
        y = aq @ dequant_weight(w2[e], w2_scale[e], block).T
        out.index_add_(0, rows // k, y * weights[rows, None])
    return out, (None if block else a2_scale)
