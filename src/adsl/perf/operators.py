"""Operator descriptors of one decoder forward pass.

Every operator is an ``Op``: a GEMM-like shape (m x k) @ (k x n) repeated ``count`` times per
instance, the bytes it moves, the part of those bytes that is a memory-resident operand (weights or
K/V, ``stream_bytes``) and its FLOPs. All numeric fields are numpy arrays that broadcast over the
shapes of the request count, tokens per request and context length, so a whole sweep is one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adsl.perf.models import ModelSpec

# Element-wise FLOPs per element; small enough that these kernels are always memory/overhead bound.
SOFTMAX_FLOPS_PER_ELEM = 5.0
NORM_FLOPS_PER_ELEM = 5.0
ACT_FLOPS_PER_ELEM = 4.0


@dataclass(frozen=True)
class Op:
    name: str
    cls: str  # fc | attention | softmax | norm | act | allreduce | transfer
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    count: np.ndarray
    bytes: np.ndarray  # total bytes read and written on a GPU (one tensor-parallel shard)
    stream_bytes: np.ndarray  # of which memory-resident operand bytes (weights or K/V)
    flops: np.ndarray
    repeat: int  # executions per forward pass (layers for per-layer operators)

    @property
    def intensity(self) -> np.ndarray:
        return self.flops / self.bytes


def gemm(name, tokens, n, k, dt, repeat=1) -> Op:
    """(tokens x k) @ (k x n) against a memory-resident weight matrix."""
    stream = n * k * dt
    moved = stream + (tokens * k + tokens * n) * dt
    return Op(name, "fc", tokens, n, k, 1.0, moved, stream, 2.0 * tokens * n * k, repeat)


def attention(name, queries, kv_len, head_dim, units, dt, repeat=1) -> Op:
    """One attention half (``attn_score``: Q K^T, ``attn_context``: P V) over ``units`` (request, KV
    head) pairs, each with ``queries`` query vectors against ``kv_len`` cached tokens."""
    n, k = (kv_len, head_dim) if name == "attn_score" else (head_dim, kv_len)
    stream = units * kv_len * head_dim * dt
    moved = stream + units * (queries * k + queries * n) * dt
    return Op(name, "attention", queries, n, k, units, moved, stream, 2.0 * queries * n * k * units, repeat)


def _elementwise(name, cls, elems, dt, rw, flops_per_elem, repeat, m, n):
    return Op(name, cls, m, n, 1.0, 1.0, rw * elems * dt, 0.0 * elems, flops_per_elem * elems, repeat)


def decoder_ops(model: ModelSpec, n_req, q, ctx, tp: int = 1, pp: int = 1) -> list[Op]:
    """Operators of one forward pass of ``n_req`` requests with ``q`` new tokens each over a KV cache
    of ``ctx`` tokens, on one tensor-parallel shard of ``tp``; ``pp`` pipeline stages add transfers."""
    n_req, q, ctx = (np.asarray(a, dtype=float) for a in (n_req, q, ctx))
    dt = float(model.bytes_per_param)
    d, hd, L = float(model.d_model), float(model.head_dim), model.layers
    tokens = n_req * q
    kv_len = ctx + q
    group = float(model.gqa_group)
    units = n_req * model.kv_heads / tp  # (request, KV head) pairs on this shard
    mq = q * group  # query vectors that share one K/V head

    ffn = model.ffn_dim / tp
    ops = [
        _elementwise("norm_attn", "norm", tokens * d, dt, 3.0, NORM_FLOPS_PER_ELEM, L, tokens, d),
        gemm("qkv", tokens, (model.q_dim + 2 * model.kv_dim) / tp, d, dt, L),
        attention("attn_score", mq, kv_len, hd, units, dt, L),
        Op(
            "softmax",
            "softmax",
            mq,
            kv_len,
            1.0,
            units,
            2.0 * units * mq * kv_len * dt,
            0.0 * units,
            SOFTMAX_FLOPS_PER_ELEM * units * mq * kv_len,
            L,
        ),
        attention("attn_context", mq, kv_len, hd, units, dt, L),
        gemm("out_proj", tokens, d, model.q_dim / tp, dt, L),
        Op("allreduce_attn", "allreduce", tokens, d, 1.0, 1.0, tokens * d * dt, 0.0 * tokens, tokens * d, L),
        _elementwise("norm_ffn", "norm", tokens * d, dt, 3.0, NORM_FLOPS_PER_ELEM, L, tokens, d),
        gemm("ffn_up", tokens, ffn, d, dt, L),
    ]
    if model.gated_ffn:
        ops.append(gemm("ffn_gate", tokens, ffn, d, dt, L))
    ops += [
        _elementwise(
            "act", "act", tokens * ffn, dt, 3.0 if model.gated_ffn else 2.0, ACT_FLOPS_PER_ELEM, L, tokens, ffn
        ),
        gemm("ffn_down", tokens, d, ffn, dt, L),
        Op("allreduce_ffn", "allreduce", tokens, d, 1.0, 1.0, tokens * d * dt, 0.0 * tokens, tokens * d, L),
        _elementwise("final_norm", "norm", tokens * d, dt, 2.0, NORM_FLOPS_PER_ELEM, 1, tokens, d),
        gemm("lm_head", tokens, model.vocab / tp, d, dt, 1),
    ]
    if pp > 1:
        ops.append(
            Op("stage_transfer", "transfer", tokens, d, 1.0, 1.0, tokens * d * dt, 0.0 * tokens, 0.0 * tokens, pp - 1)
        )
    return ops


FC_LAYER_OPS = ("qkv", "out_proj", "ffn_up", "ffn_gate", "ffn_down")
