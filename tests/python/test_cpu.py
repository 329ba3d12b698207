"""CPU tests of the Python layer (run in CI, no GPU): op schemas, the plan's CPU twin through the binding,
typed errors, and the references themselves."""
from __future__ import annotations

import math

import pytest
import torch

import hopperkit
from hopperkit import _core
from hopperkit.reference import decode_attention_reference


def test_build_info():
    info = hopperkit.build_info()
    assert info["cuda_archs"] == "sm_90a"
    assert info["version"] == hopperkit.__version__


def test_ops_are_registered_with_their_mutations():
    s = str(torch.ops.hopperkit.decode_attention.default._schema)
    assert "Tensor(a9!) workspace" in s and "Tensor(a10!) out" in s and "Tensor(a11!)? lse" in s
    assert "Tensor q," in s and "Tensor k_cache," in s  # inputs are not mutated
    s = str(torch.ops.hopperkit.decode_plan.default._schema)
    assert "Tensor(a0!) workspace" in s and "Tensor seq_lens" in s


def _cfg(max_batch=8, hq=8, hkv=1, mode=0, sm_ctas=132, max_q_len=1):
    return _core.call("make_config", max_batch, hq, hkv, 0, max_q_len, mode, 0, sm_ctas)


def test_cpu_twin_through_the_binding():
    cfg = _core.call("plan_launch_info", _cfg(), 3, 64, 0)
    raw = _core.call("plan_cpu", cfg, [131072, 64, 0], 64, 2048, 0)
    lay = _core.call("plan_layout", cfg)
    ws = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    hdr = ws[lay["header"]:lay["header"] + 32].view(torch.int32).tolist()
    C, T, P, E = hdr[:4]
    assert (T, P, E) == (2048 + 1, 3, 1)
    assert C == 132
    starts = ws[lay["cta_tile_start"]:lay["cta_tile_start"] + 4 * (C + 1)].view(torch.int32)
    budgets = (starts[1:] - starts[:-1]).tolist()
    assert max(budgets) - min(budgets) <= 1 and sum(budgets) == T


def test_plan_launch_info_slice_free_bound():
    """Dynamic plans with a max_seq_len bound of at most 4544 tokens (71 tiles: no pair can reach the sliced merge's
    72 pieces) launch the 16-row kernels without that path (cfg[17]); no bound, a longer one or a static plan
    keep them."""
    def slice_free(cfg, msl):
        return _core.call("plan_launch_info", cfg, 3, 64, msl)[17]
    assert [slice_free(_cfg(), m) for m in (0, 1, 512, 4544, 4545, 16384)] == [0, 1, 1, 1, 0, 0]
    assert slice_free(_cfg(mode=1), 512) == 0
    cfg = _core.call("plan_launch_info", _cfg(), 3, 64, 512)
    assert cfg[8] == _core.call("plan_launch_info", _cfg(), 3, 64, 0)[8]  # the grid does not change


def test_core_errors_are_typed():
    with pytest.raises(hopperkit.UnsupportedError) as e:
        _core.call("make_config", 8, 64, 2, 0, 1, 0, 0, 132)  # group 32
    assert e.value.arg == "num_q_heads / num_kv_heads" and e.value.actual == "32"
    with pytest.raises(hopperkit.InvalidValueError, match="max_q_len"):
        _core.call("make_config", 8, 8, 1, 0, 9, 0, 0, 132)
    with pytest.raises(hopperkit.DtypeError):
        _core.call("make_config", 8, 8, 1, 7, 1, 0, 0, 132)
    with pytest.raises(hopperkit.InvalidValueError, match="seq_lens"):
        _core.call("plan_launch_info", _cfg(max_batch=4), 5, 64, 0)
    with pytest.raises(hopperkit.InvalidValueError, match="max_seq_len"):
        _core.call("plan_launch_info", _cfg(), 3, 64, -1)
    # the MoE tile-height query checks its arguments before it asks the device for its SM count
    with pytest.raises(hopperkit.InvalidValueError) as e:
        _core.call("moe_tile_rows", 64, 8, 16, 32, 512, 256, True)  # more local than global experts
    assert e.value.arg == "num_local_experts" and e.value.actual == "32"
    with pytest.raises(hopperkit.InvalidValueError, match="top_k"):
        _core.call("moe_tile_rows", 64, 0, 16, 16, 512, 256, False)
    with pytest.raises(hopperkit.InvalidValueError) as e:
        _core.call("moe_tile_rows", 64, 8, 16, 16, 0, 256, False)
    assert e.value.arg == "hidden" and e.value.actual == "0"


def test_python_layer_rejects_cpu_tensors_and_bad_modes():
    q = torch.zeros(2, 8, 128, dtype=torch.bfloat16)
    with pytest.raises(hopperkit.DeviceError, match="'q'"):
        hopperkit.decode_attention(q, q, q, q, q, plan=None)
    with pytest.raises(hopperkit.InvalidValueError, match="mode"):
        hopperkit.DecodePlan(8, 8, 1, mode="round-robin")
    with pytest.raises(hopperkit.DtypeError, match="kv_dtype"):
        hopperkit.DecodePlan(8, 8, 1, kv_dtype=torch.float16)
    with pytest.raises(hopperkit.DeviceError, match="device"):
        hopperkit.DecodePlan(8, 8, 1, device="cpu")


def test_quantize_query_fp8_roundtrip():
    q = torch.randn(5, 8, 128) * 3
    q8, s = hopperkit.quantize_query_fp8(q)
    assert q8.dtype == torch.float8_e4m3fn and s.shape == (5, 8)
    back = q8.float() * s[..., None]
    # e4m3: 3 mantissa bits (half-ulp 2^-4 relative), subnormal step 2^-9 (times the scale)
    assert ((back - q).abs() <= q.abs() * 0.0625 + s[..., None] * 2.0**-10 + 1e-7).all()


def _naive(q, k, v, scale, qlen):
    """One request, one KV head group: float64 loops over tokens."""
    L = k.shape[0]
    out = torch.zeros_like(q, dtype=torch.float64)
    for t in range(qlen):
        end = L - qlen + t + 1
        for h in range(q.shape[1]):
            s = (k[:end, 0].double() @ q[t, h].double()) * scale
            p = torch.softmax(s, dim=0)
            out[t, h] = p @ v[:end, 0].double()
    return out


def test_reference_matches_naive_loops_on_cpu():
    g = torch.Generator().manual_seed(0)
    bs, L, ql, H = 16, 37, 3, 4
    pages = (L + bs - 1) // bs
    k = torch.randn(pages + 2, bs, 1, 128, generator=g)
    v = torch.randn(pages + 2, bs, 1, 128, generator=g)
    bt = torch.tensor([[3, 0, 2, 99]], dtype=torch.int32)  # pages out of order, a junk trailing entry
    q = torch.randn(ql, H, 128, generator=g)
    out, lse, covered = decode_attention_reference(q, k, v, bt, torch.tensor([L], dtype=torch.int32),
                                                   softmax_scale=1 / math.sqrt(128))
    kk = k[bt[0, :pages].long()].reshape(-1, 1, 128)[:L]
    vv = v[bt[0, :pages].long()].reshape(-1, 1, 128)[:L]
    ref = _naive(q, kk, vv, 1 / math.sqrt(128), ql)
    assert covered.all()
    assert torch.allclose(out, ref, atol=1e-10)
    # lse of the last token (sees every key)
    s = (kk[:, 0].double() @ q[-1].double().T) / math.sqrt(128)
    assert torch.allclose(lse[-1].double(), torch.logsumexp(s, dim=0), atol=1e-5)


def test_prologue_reference_against_a_per_element_loop():
    from hopperkit.reference import attention_prologue_reference
    g = torch.Generator().manual_seed(1)
    T, hq, hkv, d, rot = 3, 2, 1, 64, 32
    qkv = torch.randn(T, (hq + 2 * hkv) * d, generator=g)
    pos = torch.tensor([0, 5, 17])
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = torch.arange(32, dtype=torch.float64)[:, None] * inv[None, :]
    cs = torch.cat([ang.cos(), ang.sin()], 1).float()
    w = torch.rand(d, generator=g) + 0.5
    for neox in (True, False):
        q, k, v = attention_prologue_reference(qkv, pos, cs, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                               q_norm_weight=w, k_norm_weight=None, norm_before_rope=True,
                                               is_neox=neox)
        for t in range(T):
            x = qkv[t, :d].double()
            x = x / torch.sqrt((x * x).mean() + 1e-6) * w.double()
            y = x.clone()
            for i in range(rot // 2):
                c, s = math.cos(pos[t] * inv[i]), math.sin(pos[t] * inv[i])
                a, b = (i, i + rot // 2) if neox else (2 * i, 2 * i + 1)
                y[a], y[b] = x[a] * c - x[b] * s, x[b] * c + x[a] * s
            assert torch.allclose(q[t, 0].double(), y, atol=1e-4), (neox, t)
        assert torch.equal(v, qkv.reshape(T, hq + 2 * hkv, d)[:, hq + hkv:])
        # k has no norm weight here: rope only
        assert not torch.allclose(k, qkv.reshape(T, hq + 2 * hkv, d)[:, hq:hq + hkv])


def test_prologue_rejects_cpu_tensors():
    x = torch.zeros(2, 4 * 128, dtype=torch.bfloat16)
    with pytest.raises(hopperkit.DeviceError, match="qkv"):
        hopperkit.attention_prologue(x, x, x, x, x, x, num_q_heads=2, num_kv_heads=1, head_dim=128)


# ---------------------------------------------------------------------------------------- fused MoE (CPU)
def _naive_moe(x, ids, tw, w13, w2, s13, s2, a13, a2):
    """One (token, k) at a time, per-tensor scaling: the reference's routing and quantisation points."""
    from hopperkit.reference import fp8_quantize_reference
    T, H = x.shape
    I = w2.shape[-1]
    xq, _ = fp8_quantize_reference(x.float(), a13)
    out = torch.zeros(T, H)
    for t in range(T):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            if e < 0 or e >= w13.shape[0]:
                continue
            gu = (xq[t].float() * a13) @ (w13[e].float() * s13[e]).T
            h = torch.nn.functional.silu(gu[:I]) * gu[I:]
            hq, _ = fp8_quantize_reference(h, a2)
            y = ((hq.float() * a2) @ (w2[e].float() * s2[e]).T).bfloat16().float()
            out[t] += tw[t, k] * y
    return out


def test_moe_reference_matches_naive_loop():
    from hopperkit.reference import fused_moe_reference
    g = torch.Generator().manual_seed(3)
    T, H, I, E, K = 9, 128, 64, 5, 2
    w13 = (torch.randn(E, 2 * I, H, generator=g) * 4).to(torch.float8_e4m3fn)
    w2 = (torch.randn(E, H, I, generator=g) * 4).to(torch.float8_e4m3fn)
    s13, s2 = torch.rand(E, generator=g) * 0.01, torch.rand(E, generator=g) * 0.01
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = torch.randint(-1, E + 1, (T, K), generator=g, dtype=torch.int32)  # includes invalid ids
    tw = torch.rand(T, K, generator=g)
    a13, a2 = torch.tensor([0.02]), torch.tensor([0.01])
    got = fused_moe_reference(x, ids, tw, w13, w2, s13, s2, a13_scale=a13, a2_scale=a2)
    want = _naive_moe(x, ids, tw, w13, w2, s13, s2, a13, a2)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def _moe_workspace_as_kernel_leaves_it(block, T=2, H=256, I=256, E=16, K=4, seed=5):
    """A small MoE problem on the CPU and a workspace filled the way a fused_moe call leaves it (routing index,
    the reference's activation codes and group scales), for the kernel-codes reference."""
    import hopperkit
    from hopperkit.moe import _workspace_views
    from hopperkit.reference import fp8_quantize_reference, _moe_expert_weights, _moe_input_reference
    g = torch.Generator().manual_seed(seed)

    def weights(N, Kd):
        w = torch.randn(E, N, Kd, generator=g) / Kd ** 0.5
        if block:
            gw = w.unflatten(1, (N // 128, 128)).unflatten(3, (Kd // 128, 128))
            sc = gw.abs().amax(dim=(2, 4)) / 448.0
            return (gw / sc[:, :, None, :, None]).to(torch.float8_e4m3fn).flatten(3).flatten(1, 2), sc
        sc = w.abs().amax(dim=(1, 2)) / 448.0
        return (w / sc[:, None, None]).to(torch.float8_e4m3fn), sc
    w13, s13 = weights(2 * I, H)
    w2, s2 = weights(H, I)
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    tw = torch.rand(T, K, generator=g) + 0.1
    kw = {} if block else dict(a13_scale=(x.float().abs().max() / 448.0).reshape(1),
                               a2_scale=torch.tensor([4.0 / 448.0]))
    ws = hopperkit.moe_workspace(T, K, H, I, E, block, "cpu")
    ws.fill_(0xFF)
    v = _workspace_views(ws, T, K, H, I, E)
    flat = ids.flatten().long()
    order = torch.sort(flat, stable=True).indices  # row ids grouped by expert
    counts = torch.bincount(flat, minlength=E)
    v["expert_offset"].copy_(torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32))
    v["sorted_rows"][:order.numel()].copy_(order.to(torch.int32))
    xd = _moe_input_reference(x, None, kw.get("a13_scale"), block)
    for p, rid in enumerate(order.tolist()):
        w13e, _ = _moe_expert_weights(w13, w2, s13, s2, int(flat[rid]), block)
        gu = xd[rid // K] @ w13e.T
        h = torch.nn.functional.silu(gu[:I]) * gu[I:]
        hq, hs = fp8_quantize_reference(h, None if block else kw["a2_scale"])
        v["act"][p].copy_(hq)
        if block:
            v["act_scale"][p].copy_(hs)
    return ws, v, (x, ids, tw, w13, w2, s13, s2), kw


@pytest.mark.parametrize("block", [False, True], ids=["per_tensor", "block"])
def test_moe_reference_from_kernel_codes(block):
    from hopperkit.reference import fused_moe_reference, moe_reference_from_kernel_codes
    ws, v, args, kw = _moe_workspace_as_kernel_leaves_it(block)
    ref = fused_moe_reference(*args, **kw)
    got = moe_reference_from_kernel_codes(ws, *args, **kw)
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6), "the reference's own codes give the reference"
    act = v["act"].view(torch.uint8)

    def steppable(r):  # codes of row r with a larger neighbour (not the largest finite magnitude)
        return torch.nonzero((act[r] & 0x7F) < 0x7E).flatten()
    # the largest code two steps below the largest finite one: two steps from it exceed one step plus the
    # accumulation slack (small against a large code)
    two = torch.nonzero((act[0] & 0x7F) < 0x7D).flatten()
    c = int(two[(act[0, two] & 0x7F).argmax()])
    act[0, c] += 1  # one FP8 step: allowed, and the output follows the kernel's code
    moved = moe_reference_from_kernel_codes(ws, *args, **kw)
    assert not torch.equal(moved, ref)
    act[0, c] += 1  # two steps from the reference: not allowed
    with pytest.raises(AssertionError, match="beyond one FP8 step"):
        moe_reference_from_kernel_codes(ws, *args, **kw)
    act[0, c] -= 2
    n = int(0.04 * act.numel() / 2) + 1  # one step each, 4% of the codes in all (2% + 3 sigma allowed: 2.9%)
    cols = [steppable(r)[:n] for r in (0, 1)]
    for r in (0, 1):
        act[r, cols[r]] += 1
    with pytest.raises(AssertionError, match="activation codes differ"):
        moe_reference_from_kernel_codes(ws, *args, **kw)
    for r in (0, 1):
        act[r, cols[r]] -= 1
    assert torch.allclose(moe_reference_from_kernel_codes(ws, *args, **kw), ref, rtol=1e-5, atol=1e-6)
    if block:
        v["act_scale"][0, 0] *= 1.01
        with pytest.raises(AssertionError, match="group scales"):
            moe_reference_from_kernel_codes(ws, *args, **kw)


def test_moe_workspace_bytes_and_bad_sizes():
    import hopperkit
    n = hopperkit.moe_workspace_bytes(64, 8, 4096, 192, 192, False)
    assert n >= 64 * 8 * 4096 * 2  # at least the per-row down-projection results
    with pytest.raises(hopperkit.InvalidValueError, match="top_k"):
        hopperkit.moe_workspace_bytes(64, 17, 4096, 192, 192, False)
    with pytest.raises(hopperkit.InvalidValueError, match="max_tokens"):
        hopperkit.moe_workspace_bytes(16385, 8, 4096, 192, 192, False)
