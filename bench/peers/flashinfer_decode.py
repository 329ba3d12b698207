"""Peer: flashinfer.BatchDecodeWithPagedKVCacheWrapper (NHD layout, page 64); for q_len > 1 (speculative decode)
its BatchPrefillWithPagedKVCacheWrapper, causal.

One wrapper per rotation set (each set has its own block table, and a plan holds its page list), each with
its own 128 MiB workspace, built in CUDA-graph mode when the installed version offers it. plan() runs once,
outside the timed region; run() is what gets timed. use_tensor_cores=True is tried first (GQA group 8), then
False. FP8: q bf16 with float8_e4m3fn K/V and per-tensor k_scale/v_scale floats passed to run(). The installed
version's signatures are read with inspect at run time, so an older or newer flashinfer degrades into a
recorded skip reason rather than a crash.
"""
from __future__ import annotations

import inspect
from functools import partial

import torch

from bench.common import Skip

WORKSPACE_BYTES = 128 * 2**20


def paged_metadata(block_table: torch.Tensor, lens: list[int], page: int):
    """flashinfer's CSR page list: indptr [B+1], indices [sum pages], last_page_len [B] (all int32)."""
    npages = [(n + page - 1) // page for n in lens]
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(torch.tensor(npages, dtype=torch.int64), 0).to(torch.int32)
    bt = block_table.cpu()
    indices = torch.cat([bt[r, :p] for r, p in enumerate(npages)]).to(torch.int32)
    last = torch.tensor([(n - 1) % page + 1 if n > 0 else 0 for n in lens], dtype=torch.int32)
    dev = block_table.device
    return indptr.to(dev), indices.to(dev), last.to(dev)


def _params(fn) -> tuple[set[str], bool]:
    """(explicit parameter names, whether it also takes **kwargs); ({}, True) when it can't be read."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    return {p.name for p in ps}, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps)


def _plan_kwargs(wrapper, kv_dtype, scale) -> dict:
    # plan() may forward **kwargs to a private implementation: read the names there when it exists.
    names, var_kw = _params(wrapper.plan)
    impl = getattr(wrapper, "_plan_impl", None)
    if impl is not None:
        names |= _params(impl)[0]
        var_kw = False
    want = {"q_data_type": torch.bfloat16, "kv_data_type": kv_dtype, "o_data_type": torch.bfloat16,
            "sm_scale": scale}
    kw = {k: v for k, v in want.items() if k in names or var_kw}
    if "kv_data_type" not in kw and "data_type" in names:          # older releases: data_type = KV type
        kw["data_type"] = kv_dtype
    return kw


def _build(case, wrapper_cls, tensor_cores: bool):
    init_names = _params(wrapper_cls.__init__)[0]
    if tensor_cores and "use_tensor_cores" not in init_names:
        raise RuntimeError("this flashinfer has no use_tensor_cores option")
    fp8 = case.dtype == "fp8"
    fns, graph_mode = [], "use_cuda_graph" in init_names
    for s in case.sets:
        indptr, indices, last = paged_metadata(s.block_table, case.lens, case.page)
        kw = {"kv_layout": "NHD"}
        if "use_tensor_cores" in init_names:
            kw["use_tensor_cores"] = tensor_cores
        if graph_mode:
            kw.update(use_cuda_graph=True, paged_kv_indptr_buffer=torch.empty_like(indptr),
                      paged_kv_indices_buffer=torch.empty_like(indices),
                      paged_kv_last_page_len_buffer=torch.empty_like(last))
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=case.q.device)
        w = wrapper_cls(workspace, **kw)
        w.plan(indptr, indices, last, case.hq, case.hkv, case.d, case.page,
               **_plan_kwargs(w, s.k.dtype, case.scale))
        run_names, run_var_kw = _params(w.run)
        takes = lambda name: name in run_names or run_var_kw  # noqa: E731
        run_kw = {}
        if fp8:
            if not (takes("k_scale") and takes("v_scale")):
                raise Skip("this flashinfer's run() takes no k_scale/v_scale: no scaled FP8 KV")
            run_kw.update(k_scale=s.k_scale, v_scale=s.v_scale)
        if takes("out"):
            run_kw["out"] = torch.empty(case.batch, case.hq, case.d, dtype=torch.bfloat16, device=case.q.device)
        fns.append(partial(w.run, case.q, (s.k, s.v), **run_kw))
    fns[0]()                      # surface kernel-selection / JIT errors here, inside the fallback loop
    torch.cuda.synchronize()
    return fns, {"use_tensor_cores": tensor_cores, "cuda_graph_wrapper": graph_mode}


def _build_spec_decode(case, flashinfer):
    """q_len > 1 (speculative decode): BatchPrefillWithPagedKVCacheWrapper, causal (FlashInfer aligns the
    queries to the end of each request's KV), the FA2 backend (the bundle's prebuilt sm_90a modules), in
    CUDA-graph mode when the installed version offers it."""
    wrapper_cls = getattr(flashinfer, "BatchPrefillWithPagedKVCacheWrapper", None)
    if wrapper_cls is None:
        raise Skip(f"flashinfer {getattr(flashinfer, '__version__', '?')} has no BatchPrefillWithPagedKVCacheWrapper")
    init_names = _params(wrapper_cls.__init__)[0]
    plan_names, plan_var_kw = _params(wrapper_cls.plan)
    fp8 = case.dtype == "fp8"
    graph_mode = "use_cuda_graph" in init_names
    dev = case.q.device
    qo_indptr = torch.arange(case.batch + 1, dtype=torch.int32, device=dev) * case.q_len
    fns = []
    for s in case.sets:
        indptr, indices, last = paged_metadata(s.block_table, case.lens, case.page)
        kw = {"kv_layout": "NHD"}
        if "backend" in init_names:
            kw["backend"] = "fa2"
        if graph_mode:
            kw.update(use_cuda_graph=True, qo_indptr_buf=torch.empty_like(qo_indptr),
                      paged_kv_indptr_buf=torch.empty_like(indptr), paged_kv_indices_buf=torch.empty_like(indices),
                      paged_kv_last_page_len_buf=torch.empty_like(last))
        w = wrapper_cls(torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev), **kw)
        want = {"causal": True, "sm_scale": case.scale, "q_data_type": torch.bfloat16, "kv_data_type": s.k.dtype,
                "o_data_type": torch.bfloat16}
        w.plan(qo_indptr, indptr, indices, last, case.hq, case.hkv, case.d, case.page,
               **{k: v for k, v in want.items() if k in plan_names or plan_var_kw})
        run_kw = {"out": torch.empty(case.q.shape, dtype=torch.bfloat16, device=dev)}
        if fp8:
            run_kw.update(k_scale=s.k_scale, v_scale=s.v_scale)
        fns.append(partial(w.run, case.q, (s.k, s.v), **run_kw))
    fns[0]()
    torch.cuda.synchronize()
    return fns, {"wrapper": "BatchPrefillWithPagedKVCacheWrapper (causal, fa2)", "cuda_graph_wrapper": graph_mode}


def build(case):
    """Returns (one callable per rotation set, info); each callable returns the [batch x q_len, Hq, D] output."""
    try:
        import flashinfer
    except Exception as e:  # noqa: BLE001 - any import failure is a skip reason
        raise Skip(f"import flashinfer failed: {type(e).__name__}: {e}") from None
    if case.q_len != 1:
        fns, info = _build_spec_decode(case, flashinfer)
        info["version"] = getattr(flashinfer, "__version__", None)
        return fns, info
    wrapper_cls = getattr(flashinfer, "BatchDecodeWithPagedKVCacheWrapper", None)
    if wrapper_cls is None:
        raise Skip(f"flashinfer {getattr(flashinfer, '__version__', '?')} has no BatchDecodeWithPagedKVCacheWrapper")
    errors = []
    for tensor_cores in (True, False):
        try:
            fns, info = _build(case, wrapper_cls, tensor_cores)
            info["version"] = getattr(flashinfer, "__version__", None)
            if errors:
                info["fallback_from"] = errors
            return fns, info
        except Skip:
            raise
        except Exception as e:  # noqa: BLE001 - try the next configuration
            errors.append(f"use_tensor_cores={tensor_cores}: {type(e).__name__}: {str(e)[:200]}")
    raise RuntimeError("; ".join(errors))
