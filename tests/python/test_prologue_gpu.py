"""GPU tests of the fused attention prologue (need an sm_90 GPU; skipped with a reason elsewhere)."""
from __future__ import annotations

import math
import os
import random

import pytest
import torch

import hopperkit
from hopperkit.reference import attention_prologue_reference
from decode_cases import check as check_decode, Case, make_plan
from subprocess_rerun import rerun_with_env

pytestmark = pytest.mark.gpu

BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
RUN_SEED = int(os.environ.get("HK_TEST_SEED", random.randrange(1 << 30)))
print(f"prologue GPU tests: HK_TEST_SEED={RUN_SEED}")
NAN_BYTE = 0x7F  # e4m3 NaN / part of a bf16 NaN: cache poison


def rope_cache(max_pos, rot, dtype=torch.float32, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(dtype).cuda()


def make_caches(num_blocks, bs, hkv, d, dtype, layout):
    shape = (num_blocks, bs, hkv, d)
    if layout == "NHD":
        k = torch.empty(shape, dtype=dtype, device="cuda")
        v = torch.empty(shape, dtype=dtype, device="cuda")
    elif layout == "HND":
        k = torch.empty(num_blocks, hkv, bs, d, dtype=dtype, device="cuda").permute(0, 2, 1, 3)
        v = torch.empty(num_blocks, hkv, bs, d, dtype=dtype, device="cuda").permute(0, 2, 1, 3)
    else:  # packed K|V pages
        kv = torch.empty(num_blocks, 2, bs, hkv, d, dtype=dtype, device="cuda")
        k, v = kv[:, 0], kv[:, 1]
    k.view(torch.uint8).fill_(NAN_BYTE)
    v.view(torch.uint8).fill_(NAN_BYTE)
    return k, v


def run_case(T=37, hq=8, hkv=2, d=128, rot=None, is_neox=True, norm="before", kv_dtype=BF16, q_dtype=BF16,
             bs=16, layout="NHD", pos_dtype=torch.int64, cs_dtype=torch.float32, pad=3, row_pad=0, seed=0,
             w_dtype=BF16):
    g = torch.Generator(device="cpu").manual_seed((RUN_SEED + seed) % (1 << 31))
    rot = rot or d
    width = (hq + 2 * hkv) * d
    qkv_buf = torch.randn(T, width + row_pad, generator=g).to(BF16).cuda()
    qkv = qkv_buf[:, :width]
    max_pos = 4096
    positions = torch.randint(0, max_pos, (T,), generator=g).to(pos_dtype).cuda()
    cs = rope_cache(max_pos, rot, cs_dtype)
    qw = kw = None
    if norm != "none":
        qw = (torch.rand(d, generator=g) + 0.5).to(w_dtype).cuda()
        kw = (torch.rand(d, generator=g) + 0.5).to(w_dtype).cuda()
    num_blocks = (T + bs - 1) // bs + 3
    kc, vc = make_caches(num_blocks, bs, hkv, d, kv_dtype, layout)
    slots = torch.randperm(num_blocks * bs, generator=g)[:T].long()
    pad_idx = torch.randperm(T, generator=g)[:pad]
    slots[pad_idx] = -1
    slots = slots.cuda()
    ks = vs = None
    if kv_dtype == FP8:
        ks = torch.tensor([0.02], device="cuda")
        vs = torch.tensor([0.015], device="cuda")
    q_out = torch.full((T, hq, d), float("nan"), dtype=BF16, device="cuda").to(q_dtype)
    res = hopperkit.attention_prologue(qkv, positions, cs, kc, vc, slots, num_q_heads=hq, num_kv_heads=hkv,
                                       head_dim=d, q_norm_weight=qw, k_norm_weight=kw, eps=1e-6,
                                       norm_before_rope=(norm != "after"), is_neox=is_neox, k_scale=ks, v_scale=vs,
                                       q_out_dtype=q_dtype, q_out=q_out, check_errors=True)
    torch.cuda.synchronize()
    rq, rk, rv = attention_prologue_reference(qkv, positions, cs, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                              q_norm_weight=qw, k_norm_weight=kw, eps=1e-6,
                                              norm_before_rope=(norm != "after"), is_neox=is_neox)
    what = f"T={T} hq={hq} hkv={hkv} d={d} rot={rot} neox={is_neox} norm={norm} kv={kv_dtype} q={q_dtype} " \
           f"bs={bs} {layout} w={w_dtype} seed={RUN_SEED}+{seed}"
    # ---- q
    if q_dtype == FP8:
        q8, qs = res
        got_q = q8.float() * qs[..., None]
        # yardstick: the same dynamic quantisation of the float32 reference
        ref_scale = rq.abs().amax(-1).clamp_min(1e-12) / 448
        yard = (rq / ref_scale[..., None]).clamp(-448, 448).to(FP8).float() * ref_scale[..., None]
    else:
        got_q = res.float()
        yard = rq.to(BF16).float()
    assert torch.isfinite(got_q).all(), what
    err = (got_q - rq).abs().max().item()
    yerr = (yard - rq).abs().max().item()
    assert err <= 2 * yerr + 1e-2, f"{what}: q error {err:.3e} vs yardstick {yerr:.3e}"
    # ---- cache: written slots match, every other slot untouched
    ok = slots >= 0
    blk, off = slots[ok] // bs, slots[ok] % bs

    def deq(c, s):
        return c.float() * (s.item() if s is not None else 1.0)

    for name, cache, ref, sc in (("k", kc, rk, ks), ("v", vc, rv, vs)):
        got = deq(cache[blk, off], sc)
        want = ref[ok]
        if kv_dtype == FP8:
            yard = (want / sc.item()).clamp(-448, 448).to(FP8).float() * sc.item()
        else:
            yard = want.to(BF16).float()
        e = (got - want).abs().max().item()
        ye = (yard - want).abs().max().item()
        assert e <= 2 * ye + 1e-2, f"{what}: {name} cache error {e:.3e} vs yardstick {ye:.3e}"
        touched = torch.zeros(cache.shape[0], cache.shape[1], dtype=torch.bool, device="cuda")
        touched[blk, off] = True
        rest = cache[~touched].reshape(-1).view(torch.uint8)
        assert (rest == NAN_BYTE).all(), f"{what}: {name} cache slots outside slot_mapping were written"


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("norm", ["before", "after", "none"])
def test_styles_orders_head_dims(d, is_neox, norm):
    run_case(d=d, is_neox=is_neox, norm=norm, seed=d + is_neox)


# partial rotary: the pair kernel's specialised modes run their general-chunk-map kernels (pair_full_rotary() in
# heuristics.h), with (128, 96) a rotary width that is not a power-of-two share of the head
@pytest.mark.parametrize("d,rot", [(128, 64), (64, 32), (256, 128), (128, 16), (128, 96)])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_partial_rotary(d, rot, is_neox):
    run_case(d=d, rot=rot, is_neox=is_neox, seed=rot)


@pytest.mark.parametrize("d,rot", [(128, 64), (256, 64), (128, 96)])
def test_partial_rotary_fp8(d, rot):
    """Partial rotary with the fp8 query and cache (the fp8 item path's stores of the second chunk)."""
    run_case(d=d, rot=rot, kv_dtype=FP8, q_dtype=FP8, seed=rot + 1)


@pytest.mark.parametrize("kv_dtype,q_dtype", [(BF16, BF16), (FP8, FP8), (FP8, BF16), (BF16, FP8)],
                         ids=["bf16", "fp8", "kvfp8_qbf16", "kvbf16_qfp8"])
@pytest.mark.parametrize("layout,bs", [("NHD", 16), ("HND", 64), ("packed", 128)])
def test_dtypes_layouts_block_sizes(kv_dtype, q_dtype, layout, bs):
    run_case(kv_dtype=kv_dtype, q_dtype=q_dtype, layout=layout, bs=bs, seed=bs)


def test_int32_positions_bf16_table_strided_qkv_and_head_counts():
    run_case(T=300, hq=64, hkv=8, pos_dtype=torch.int32, cs_dtype=BF16, row_pad=64, pad=20, seed=5)
    run_case(T=1, hq=8, hkv=1, pad=0, seed=6)
    run_case(T=5000, hq=8, hkv=1, kv_dtype=FP8, q_dtype=FP8, pad=50, seed=7)


@pytest.mark.parametrize("T", [37, 3001])
@pytest.mark.parametrize("q_kv", ["bf16", "fp8"])
def test_float32_norm_weights(T, q_kv):
    """float32 norm weights, NeoX (the pair kernel's specialised item paths read bf16 weights only: float32 ones
    take the generic path), at a one-vector-kernel size and a pair-kernel size, norm before and after RoPE."""
    dt = BF16 if q_kv == "bf16" else FP8
    for norm in ("before", "after"):
        run_case(T=T, hq=16, hkv=2, kv_dtype=dt, q_dtype=dt, norm=norm, w_dtype=torch.float32, pad=T // 9,
                 seed=T + (norm == "after"))


@pytest.mark.parametrize("T", [37, 3001])
@pytest.mark.parametrize("norm", ["before", "after", "none"])
def test_fp8_norm_orders(T, norm):
    """fp8 query and cache with bf16 norm weights, NeoX, full rotary (the pair kernel's specialised fp8 item path),
    the norm before RoPE, after it and none, at a one-vector-kernel size and a pair-kernel size."""
    run_case(T=T, hq=16, hkv=2, kv_dtype=FP8, q_dtype=FP8, norm=norm, pad=T // 9, seed=T + len(norm))


@pytest.mark.parametrize("T,hq,hkv,d,is_neox,rot", [(2113, 2, 1, 256, False, 128), (4099, 4, 2, 64, True, 32),
                                                      (1057, 8, 1, 128, True, 128), (529, 64, 8, 128, True, 128)])
def test_launch_shapes(T, hq, hkv, d, is_neox, rot):
    """Few heads of every head dim, partial rotary, GPT-J, many tokens with padding; the full Hy3 head count."""
    run_case(T=T, hq=hq, hkv=hkv, d=d, is_neox=is_neox, rot=rot, pad=T // 7, seed=T)


# HOPPERKIT_PROLOGUE_KERNEL (read once per process): "one" forces the one-vector kernel, "pair" the pair kernel;
# unset, use_pair_kernel() in include/hopperkit/prologue/heuristics.h picks by size (the pair kernel from 2^18
# vectors: most cases here are below; three of test_launch_shapes, int32_positions' 300- and 5000-token cases, the
# 3001-token cases of float32_norm_weights and fp8_norm_orders and the 2801-token untrusted case are above).
FORCED_SUBSET = ("styles_orders or partial_rotary or dtypes_layouts or int32_positions or launch_shapes or "
                 "untrusted_indices_small or float32_norm_weights or fp8_norm_orders")


# HOPPERKIT_PROLOGUE_ORDER (read once per process): "blocked" forces the pair kernel's block order (blocks of a
# warp's heads in tokens, head-major) where pair_block_tokens() in heuristics.h would pick token order.
@pytest.mark.parametrize("kernel,order", [("one", ""), ("pair", ""), ("pair", "blocked")],
                         ids=["one", "pair", "pair_blocked"])
def test_each_kernel_forced(kernel, order):
    """Both prologue kernels, the pair kernel in the order the host picks and in block order everywhere, on every
    shape of the subset, whatever their size: the tests again in a subprocess with HOPPERKIT_PROLOGUE_KERNEL /
    _ORDER set (same seed; a failure replays with HK_TEST_SEED)."""
    if os.environ.get("HOPPERKIT_PROLOGUE_KERNEL"):
        pytest.skip("already inside a forced run")
    env = {"HOPPERKIT_PROLOGUE_KERNEL": kernel, "HK_TEST_SEED": str(RUN_SEED)}
    if order:
        env["HOPPERKIT_PROLOGUE_ORDER"] = order
    out = rerun_with_env(__file__, FORCED_SUBSET, env)
    assert " passed" in out and " failed" not in out, out[-2000:]


@pytest.mark.parametrize("T", [10, 2801])
def test_untrusted_indices_small_and_large(T):
    hq, hkv, d, bs = 4, 1, 128, 16
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(BF16)
    cs = rope_cache(T + 10, d)
    positions = torch.arange(T, device="cuda")
    bad_pos = [2, 3, T - 1]
    positions[2] = T + 10   # beyond the table
    positions[3] = -1
    positions[T - 1] = -5
    nb = (T + bs - 1) // bs
    kc, vc = make_caches(nb, bs, hkv, d, BF16, "NHD")
    slots = torch.arange(T, device="cuda", dtype=torch.int64)
    slots[5] = nb * bs       # beyond the cache
    slots[6] = -7
    slots[T - 2] = -1        # padding: q only
    q_out = torch.full((T, hq, d), float("nan"), dtype=BF16, device="cuda")
    err = torch.zeros(2, dtype=torch.int32, device="cuda")
    hopperkit.attention_prologue(qkv, positions, cs, kc, vc, slots, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                 q_out=q_out, error_count=err)
    assert err.tolist() == [3, 2]
    good = [t for t in range(T) if t not in bad_pos]
    assert torch.isnan(q_out[bad_pos].float()).all()  # skipped tokens
    assert torch.isfinite(q_out[good].float()).all()
    written = torch.zeros(nb * bs, dtype=torch.bool)
    written[[t for t in good if t not in (5, 6, T - 2)]] = True
    kb = kc.reshape(nb * bs, -1).view(torch.uint8).cpu()
    assert torch.isfinite(kc.reshape(nb * bs, -1).float().cpu()[written]).all()
    assert (kb[~written] == NAN_BYTE).all(), "cache slots of skipped tokens were written"


def test_untrusted_indices_are_counted_and_skipped():
    T, hq, hkv, d, bs = 10, 4, 1, 128, 16
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(BF16)
    cs = rope_cache(100, d)
    positions = torch.arange(T, device="cuda")
    positions[2] = 100     # beyond the table
    positions[3] = -1
    kc, vc = make_caches(2, bs, hkv, d, BF16, "NHD")
    slots = torch.arange(T, device="cuda", dtype=torch.int64)
    slots[5] = 2 * bs      # beyond the cache
    slots[6] = -7
    q_out = torch.full((T, hq, d), float("nan"), dtype=BF16, device="cuda")
    err = torch.zeros(2, dtype=torch.int32, device="cuda")
    hopperkit.attention_prologue(qkv, positions, cs, kc, vc, slots, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                 q_out=q_out, error_count=err)
    assert err.tolist() == [2, 2]
    assert torch.isnan(q_out[2].float()).all() and torch.isnan(q_out[3].float()).all()  # skipped tokens
    assert torch.isfinite(q_out[[0, 1, 4, 5, 6, 7, 8, 9]].float()).all()
    with pytest.raises(hopperkit.InvalidValueError, match="positions"):
        hopperkit.attention_prologue(qkv, positions, cs, kc, vc, slots, num_q_heads=hq, num_kv_heads=hkv,
                                     head_dim=d, check_errors=True)


def test_check_errors_refused_under_capture(monkeypatch):
    """check_errors reads error_count on the host: under CUDA-graph capture (or torch.compile) it raises a typed
    error before anything is launched or allocated, instead of a capture failure."""
    T, hq, hkv, d, bs = 4, 4, 1, 128, 16
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(BF16)
    kc, vc = make_caches(1, bs, hkv, d, BF16, "NHD")
    before = kc.view(torch.uint8).clone()
    q_out = torch.full((T, hq, d), float("nan"), dtype=BF16, device="cuda")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(hopperkit.InvalidValueError, match="check_errors"):
        hopperkit.attention_prologue(qkv, torch.arange(T, device="cuda"), rope_cache(16, d), kc, vc,
                                     torch.arange(T, device="cuda", dtype=torch.int64), num_q_heads=hq,
                                     num_kv_heads=hkv, head_dim=d, q_out=q_out, check_errors=True)
    monkeypatch.undo()
    torch.cuda.synchronize()
    assert torch.isnan(q_out.float()).all() and torch.equal(kc.view(torch.uint8), before), "something was launched"


def test_bad_inputs_raise_typed_errors():
    T, hq, hkv, d = 4, 4, 1, 128
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(BF16)
    cs = rope_cache(64, d)
    pos = torch.arange(T, device="cuda")
    kc, vc = make_caches(2, 16, hkv, d, BF16, "NHD")
    slots = torch.arange(T, device="cuda")
    kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d)
    with pytest.raises(hopperkit.UnsupportedError, match="head_dim"):
        hopperkit.attention_prologue(torch.randn(T, 6 * 96, device="cuda").to(BF16), pos, rope_cache(64, 96), kc, vc,
                                     slots, num_q_heads=4, num_kv_heads=1, head_dim=96)
    with pytest.raises(hopperkit.DtypeError, match="qkv"):
        hopperkit.attention_prologue(qkv.float(), pos, cs, kc, vc, slots, **kw)
    with pytest.raises(hopperkit.DtypeError, match="slot_mapping"):
        hopperkit.attention_prologue(qkv, pos, cs, kc, vc, slots.int(), **kw)
    with pytest.raises(hopperkit.ShapeError, match="qkv"):
        hopperkit.attention_prologue(qkv[:, :-8], pos, cs, kc, vc, slots, **kw)
    with pytest.raises(hopperkit.InvalidValueError, match="cos_sin_cache"):
        hopperkit.attention_prologue(qkv, pos, rope_cache(64, 24), kc, vc, slots, **kw)  # rotary 24
    with pytest.raises(hopperkit.DeviceError, match="positions"):
        hopperkit.attention_prologue(qkv, pos.cpu(), cs, kc, vc, slots, **kw)
    assert (kc.view(torch.uint8) == NAN_BYTE).all(), "a rejected call must not write"


def test_cuda_graph_capture():
    T, hq, hkv, d, bs = 64, 8, 1, 128, 64
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(BF16)
    cs = rope_cache(4096, d)
    pos = torch.randint(0, 4096, (T,), device="cuda")
    kc, vc = make_caches(4, bs, hkv, d, FP8, "NHD")
    slots = torch.randperm(4 * bs, device="cuda")[:T]
    ks = torch.tensor([0.02], device="cuda")
    q8 = torch.empty(T, hq, d, dtype=FP8, device="cuda")
    qs = torch.empty(T, hq, device="cuda")
    err = torch.zeros(2, dtype=torch.int32, device="cuda")
    kw = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, k_scale=ks, v_scale=ks, q_out=q8, q_scale_out=qs,
              error_count=err)
    hopperkit.attention_prologue(qkv, pos, cs, kc, vc, slots, **kw)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        hopperkit.attention_prologue(qkv, pos, cs, kc, vc, slots, **kw)
    for _ in range(3):
        qkv.copy_(torch.randn_like(qkv, dtype=torch.float32).to(BF16))
        pos.copy_(torch.randint(0, 4096, (T,), device="cuda"))
        g.replay()
        torch.cuda.synchronize()
        rq, _, _ = attention_prologue_reference(qkv, pos, cs, num_q_heads=hq, num_kv_heads=hkv, head_dim=d)
        got = q8.float() * qs[..., None]
        assert ((got - rq).abs() <= rq.abs() * 0.07 + qs[..., None] * 2.0**-9 + 1e-6).all()
    assert err.tolist() == [0, 0]


def test_opcheck():
    T, hq, hkv, d = 8, 4, 1, 128
    qkv = torch.randn(T, (hq + 2 * hkv) * d, device="cuda").to(BF16)
    kc, vc = make_caches(2, 16, hkv, d, BF16, "NHD")
    torch.library.opcheck(torch.ops.hopperkit.attention_prologue.default,
                          (qkv, torch.arange(T, device="cuda"), rope_cache(64, d), kc, vc,
                           torch.arange(T, device="cuda"), None, None, None, None,
                           torch.empty(T, hq, d, dtype=BF16, device="cuda"), None,
                           torch.zeros(2, dtype=torch.int32, device="cuda"), hq, hkv, d, 1e-6, True, True))


def test_prologue_then_fp8_decode_matches_the_float32_step():
    """One decode step: prologue (norm + rope + fp8 cache write + fp8 q) then FP8 decode attention, against the
    float32 reference of the whole step."""
    g = torch.Generator(device="cpu").manual_seed(RUN_SEED % (1 << 31))
    hq, hkv, d, bs = 8, 1, 128, 64
    lens = [1, 63, 64, 65, 700, 3000]  # cached tokens including the new one
    B = len(lens)
    pages = [(L + bs - 1) // bs for L in lens]
    nb = sum(pages) + 2
    perm = torch.randperm(nb, generator=g)
    bt = torch.zeros(B, max(pages), dtype=torch.int32)
    at = 0
    for b, n in enumerate(pages):
        bt[b, :n] = perm[at:at + n].int()
        at += n
    bt = bt.cuda()
    ks = torch.tensor([0.03], device="cuda")
    vs = torch.tensor([0.02], device="cuda")
    kc, vc = make_caches(nb, bs, hkv, d, FP8, "NHD")
    # history (all but the last token of each request) written directly in fp8
    k_hist = torch.randn(nb, bs, hkv, d, generator=g).cuda()
    v_hist = torch.randn(nb, bs, hkv, d, generator=g).cuda()
    kc.copy_((k_hist / ks).clamp(-448, 448).to(FP8))
    vc.copy_((v_hist / vs).clamp(-448, 448).to(FP8))
    # the new token of each request goes through the prologue
    qkv = torch.randn(B, (hq + 2 * hkv) * d, generator=g).to(BF16).cuda()
    positions = torch.tensor([L - 1 for L in lens], device="cuda")
    slots = torch.tensor([int(bt[b, (L - 1) // bs]) * bs + (L - 1) % bs for b, L in enumerate(lens)],
                         device="cuda")
    cs = rope_cache(8192, d)
    qw = (torch.rand(d, generator=g) + 0.5).to(BF16).cuda()
    kw = (torch.rand(d, generator=g) + 0.5).to(BF16).cuda()
    q8, qs = hopperkit.attention_prologue(qkv, positions, cs, kc, vc, slots, num_q_heads=hq, num_kv_heads=hkv,
                                          head_dim=d, q_norm_weight=qw, k_norm_weight=kw, k_scale=ks, v_scale=vs,
                                          q_out_dtype=FP8, check_errors=True)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    case = Case(q=q8, k_cache=kc, v_cache=vc, block_table=bt, seq_lens=seq_lens, query_start_loc=None,
                max_q_len=1, q_scale=qs, k_scale=ks, v_scale=vs)
    plan = make_plan(case)
    out = hopperkit.decode_attention(q8, kc, vc, bt, seq_lens, plan, q_scale=qs, k_scale=ks, v_scale=vs)
    check_decode(case, out, None, "prologue + fp8 decode (against the fp8 inputs)")
    # and against the float32 step: the unquantised q, k, v of the new token, the float history
    rq, rk, rv = attention_prologue_reference(qkv, positions, cs, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                              q_norm_weight=qw, k_norm_weight=kw)
    k_f = kc.float() * ks.item()
    v_f = vc.float() * vs.item()
    ref = torch.empty(B, hq, d, device="cuda")
    for b, L in enumerate(lens):
        idx = bt[b, :pages[b]].long()
        kk = k_f[idx].reshape(-1, hkv, d)[:L].clone()
        vv = v_f[idx].reshape(-1, hkv, d)[:L].clone()
        kk[L - 1], vv[L - 1] = rk[b], rv[b]  # the new token in float32
        s = torch.einsum("hd,jd->hj", rq[b], kk[:, 0]) / math.sqrt(d)
        ref[b] = torch.softmax(s, -1) @ vv[:, 0]
    rel = ((out.float() - ref).norm() / ref.norm()).item()
    assert rel < 0.05, f"prologue + fp8 decode vs float32 step: relative error {rel:.3e}"
