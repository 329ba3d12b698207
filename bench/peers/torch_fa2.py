"""Peer: PyTorch's FlashAttention-2 varlen forward (torch.ops.aten._flash_attention_forward).

It has no paged KV, so each rotation set's valid tokens are packed once, outside the timed region, into
contiguous [total_k, num_kv_heads, head_dim] K and V (request after request). BF16 only.
"""
from __future__ import annotations

from functools import partial

import torch

from bench.common import Skip


def pack_kv(kv_set):
    """Contiguous [total_tokens, Hkv, D] copies of one set's valid K and V, in request order."""
    k = kv_set.k.flatten(0, 1)[kv_set.token_idx].contiguous()
    v = kv_set.v.flatten(0, 1)[kv_set.token_idx].contiguous()
    return k, v


def build(case):
    """Returns one callable per rotation set; each returns the [batch x q_len, Hq, D] bf16 output."""
    if case.dtype != "bf16":
        raise Skip("torch FA2 has no FP8 KV")
    op = torch.ops.aten._flash_attention_forward
    ql = case.q_len
    cu_q = torch.arange(case.batch + 1, dtype=torch.int32, device=case.q.device) * ql
    packs = [pack_kv(s) for s in case.sets]

    # schema: (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    #          return_debug_mask, *, scale) -> (output, softmax_logsumexp, rng_state, unused, debug_attn_mask)
    # q_len > 1 (speculative decode): causal, which FA2 aligns to the bottom right when q is shorter than k (each
    # request's new tokens are its last q_len)
    def call(k, v):
        return op(case.q, k, v, cu_q, case.cu_k, ql, case.max_len, 0.0, ql > 1, False, scale=case.scale)[0]

    return [partial(call, k, v) for k, v in packs], {}
