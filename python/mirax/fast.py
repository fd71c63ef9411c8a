"""`mirax.fast`: MLX's fused ops, with MLX's signatures, checks and masks.

mirax has no hand-written kernels to pick between: each op is written with mirax ops (the
same math as MLX's own fallbacks, f32 statistics for the norms), so it differentiates,
vmaps and compiles like any other code, and `mr.compile` fuses it.

    mr.fast.rms_norm(x, w, 1e-5)
    mr.fast.rope(x, 64, traditional=False, base=10000.0, scale=1.0, offset=0)
    mr.fast.scaled_dot_product_attention(q, k, v, scale=d ** -0.5, mask="causal")
"""
from __future__ import annotations

import math

from .array import Array, array, asarray, where_text
from .dialect import dtypes as dt
from .dtypes import finfo, result_type
from . import ops
from .fused import fused

__all__ = ["rms_norm", "layer_norm", "rope", "scaled_dot_product_attention", "metal_kernel", "cuda_kernel",
           "precompiled_cuda_kernel"]


def _err(op, msg):
    return ValueError(f"[{op}] {msg}{where_text()}")


def _check_vector(op, name, v, n):
    if v.ndim != 1:
        raise _err(op, f"{name} must have 1 dimension but has {v.ndim} dimensions.")
    if v.size != n:
        raise _err(op, f"{name} must have the same size as the last dimension of x but has {v.size} elements.")


@fused
def rms_norm(x, weight, eps, *, stream=None) -> Array:
    """x / sqrt(mean(x^2, -1) + eps) * weight (statistics in float32; `weight` may be None):

        mr.fast.rms_norm(mr.ones((2, 4)), mr.full((4,), 2.0), 1e-5)   # all 2.0
    """
    with _on(stream):
        x = asarray(x)
        if x.ndim == 0:
            raise _err("rms_norm", "Input must have at least 1 dimension but got input with 0 dimensions.")
        if weight is not None:
            weight = asarray(weight)
            _check_vector("rms_norm", "weight", weight, x.shape[-1])
        out = result_type(x, weight) if weight is not None else x.dtype
        if out.kind != "f":
            raise _err("rms_norm", f"Received unsupported type {out.name}.")
        x32 = x.astype(dt.float32)
        y = (x32 * ops.rsqrt(ops.mean(ops.square(x32), axis=-1, keepdims=True) + float(eps))).astype(out)
        return y * weight.astype(out) if weight is not None else y


@fused
def layer_norm(x, weight, bias, eps, *, stream=None) -> Array:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (either may be None):

        mr.fast.layer_norm(mr.array([[1.0, 3.0]]), None, None, 0.0)   # [[-1, 1]]
    """
    with _on(stream):
        x = asarray(x)
        if x.ndim == 0:
            raise _err("layer_norm", "Input must have at least 1 dimension but got input with 0 dimensions.")
        parts = [x]
        for name, v in (("weight", weight), ("bias", bias)):
            if v is not None:
                _check_vector("layer_norm", name, asarray(v), x.shape[-1])
                parts.append(asarray(v))
        out = result_type(*parts)
        if out.kind != "f":
            raise _err("layer_norm", f"Received unsupported type {out.name}.")
        x32 = x.astype(dt.float32)
        xc = x32 - ops.mean(x32, axis=-1, keepdims=True)
        var = ops.mean(ops.square(xc), axis=-1, keepdims=True)
        y = (xc * ops.rsqrt(var + float(eps))).astype(out)
        if weight is not None:
            y = y * asarray(weight).astype(out)
        if bias is not None:
            y = y + asarray(bias).astype(out)
        return y


def rope(a, dims, *, traditional, base, scale, offset, freqs=None, stream=None) -> Array:
    """Rotary positional encoding of the first `dims` features of the last axis; position
    `offset + i` for row i of axis -2 (`offset` an int, or one per batch entry). The
    frequencies are base^(-2j/dims), or 1/freqs when `freqs` is given (then base is None):

        mr.fast.rope(x, 8, traditional=False, base=10000.0, scale=1.0, offset=0)
    """
    with _on(stream):
        x = asarray(a)
        offset = asarray(offset)
        if x.ndim < 3:
            raise _err("rope", f"Input must have at least 3 dimensions but got input with {x.ndim} dimensions.")
        if x.dtype.kind != "f":
            raise _err("rope", f"Input must be a floating type but got {x.dtype.name}.")
        if offset.ndim > 1:
            raise _err("rope", f"offset must have at most one dimension but has shape {offset.shape}.")
        if offset.size != 1 and offset.size != x.shape[0]:
            raise _err("rope", f"offset must be a scalar or vector with {x.shape[0]} elements but has shape "
                               f"{offset.shape}.")
        if offset.dtype.kind not in "iu":
            raise _err("rope", f"offset must be an integer but got type {offset.dtype.name}.")
        dims = int(dims)
        if dims <= 0:
            raise _err("rope", f"dims must be positive but got {dims}.")
        if dims % 2:
            raise _err("rope", f"dims must be even but got {dims}.")
        if dims > x.shape[-1]:
            raise _err("rope", f"dims must not exceed the input's last dimension ({x.shape[-1]}) but got {dims}.")
        if freqs is not None:
            if base is not None:
                raise _err("rope", "Only one of base or freqs can have a value.")
            freqs = asarray(freqs).astype(dt.float32)
            if freqs.ndim != 1 or freqs.shape[0] != dims // 2:
                raise _err("rope", f"freqs must be one dimensional with size {dims // 2} but got shape "
                                   f"{freqs.shape}.")
        elif base is None:
            raise _err("rope", "Neither base nor freqs has a value.")
        return _rope(x, dims, traditional, base, float(scale), offset, freqs)


def _rope(x, dims, traditional, base, scale, offset, freqs):
    shape = x.shape
    if x.ndim == 3:
        x = ops.expand_dims(x, 1)
    elif x.ndim > 4:
        x = ops.flatten(x, 1, x.ndim - 3)
    half = dims // 2
    positions = ops.arange(x.shape[2], dtype=dt.float32) + (
        ops.expand_dims(offset, (-1, -2)) if offset.size > 1 else ops.reshape(offset, ()))
    positions = positions.astype(dt.float32) * scale
    if freqs is not None:
        inv = ops.reciprocal(freqs)
    else:
        inv = ops.exp(ops.arange(0, -half, -1, dtype=dt.float32) * (math.log(base) / half))
    theta = ops.expand_dims(positions, -1) * inv
    cos, sin = ops.cos(theta).astype(x.dtype), ops.sin(theta).astype(x.dtype)
    if traditional:  # rotate the pairs (0, 1), (2, 3), ...
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        rot = ops.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        rot = ops.reshape(rot, x.shape[:-1] + (dims,))
    else:  # rotate the halves (i, i + dims/2)
        x1, x2 = x[..., :half], x[..., half:dims]
        rot = ops.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    if dims < x.shape[-1]:
        rot = ops.concatenate([rot, x[..., dims:]], axis=-1)
    return ops.reshape(rot, shape)


def scaled_dot_product_attention(q, k, v, *, scale, mask=None, sinks=None, force_fused=False,
                                 stream=None) -> Array:
    """softmax(scale * q @ k^T + mask) @ v over inputs of shape (B, heads, L, D); k and v
    may have fewer heads (grouped-query attention). `mask`: None, "causal" (the last query
    sees every key, aligned at the end), a bool array (False masks out) or an additive
    array, broadcast to (B, heads, L_q, L_k); `sinks`: one extra logit per head:

        mr.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5, mask="causal")
    """
    op = "scaled_dot_product_attention"
    with _on(stream):
        q, k, v = asarray(q), asarray(k), asarray(v)
        for t in (q, k, v):
            if t.ndim != 4:
                raise _err(op, f"input with shape {t.shape} expected to be rank 4")
        if isinstance(mask, str) and mask != "causal":
            raise _err(op, f"invalid mask option '{mask}'. Must be 'causal', or an array.")
        causal = isinstance(mask, str)
        mask = None if causal or mask is None else asarray(mask)
        if mask is not None and mask.ndim > 4:
            raise _err(op, f"the mask with shape {mask.shape} expected to have at most rank 4.")
        for t in (k, v):
            if t.shape[0] != q.shape[0]:
                raise _err(op, f"mismatching batch dimension for input with shape {t.shape}.")
        if q.shape[-1] != k.shape[-1]:
            raise _err(op, f"query, keys expected to have matching last dimension; found query shape {q.shape} "
                           f"for keys shape {k.shape}.")
        hq, hkv = q.shape[-3], k.shape[-3]
        if v.shape[-3] != hkv:
            raise _err(op, f"keys, values expected to have matching n_kv_heads; found keys with n_heads {hkv} "
                           f"for values with n_heads {v.shape[-3]}.")
        if hq % hkv:
            raise _err(op, f"n_heads must be a multiple of n_kv_heads, found n_heads {hq} for n_kv_heads {hkv}.")
        out = result_type(q, k, v)
        if out.kind != "f":
            raise _err(op, f"Received unsupported type {out.name}.")
        q, k, v = q.astype(out), k.astype(out), v.astype(out)
        if mask is not None:
            if result_type(mask.dtype, out) is not out:
                raise _err(op, f"Mask type must promote to output type {out.name}.")
            if mask.dtype is not dt.bool_:
                mask = mask.astype(out)
            mask = ops.broadcast_to(mask, q.shape[:-1] + (k.shape[-2],))
        if sinks is not None:
            sinks = asarray(sinks)
            if result_type(sinks.dtype, out) is not out:
                raise _err(op, f"Type of sinks must promote to output type {out.name}.")
            if sinks.ndim != 1 or sinks.shape[0] != hq:
                raise _err(op, f"Received invalid shape for sinks {sinks.shape}.")
            sinks = sinks.astype(out)
        return _attention(q, k, v, float(scale), causal, mask, sinks)


def _attention(q, k, v, scale, causal, mask, sinks):
    hq, hkv = q.shape[1], k.shape[1]
    rep = hq // hkv
    q = q * array(scale, q.dtype)
    if rep > 1:  # each key/value head serves `rep` query heads
        q = ops.unflatten(q, 1, (hkv, rep))
        k, v = ops.expand_dims(k, 2), ops.expand_dims(v, 2)
    scores = ops.matmul(q, ops.swapaxes(k, -1, -2))
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        mask = ops.expand_dims(ops.arange(lk - lq, lk), 1) >= ops.expand_dims(ops.arange(lk), 0)
    if mask is not None:
        if rep > 1 and mask.ndim >= 3:
            mask = ops.expand_dims(mask, -3) if mask.shape[-3] == 1 else ops.unflatten(mask, -3, (hkv, rep))
        if mask.dtype is dt.bool_:
            scores = ops.where(mask, scores, array(finfo(scores.dtype).min, scores.dtype))
        else:
            scores = scores + mask
    if sinks is not None:
        s = ops.reshape(sinks, (1, hq, 1, 1))
        if scores.ndim == 5:
            s = ops.unflatten(s, 1, (hkv, rep))
        scores = ops.concatenate([ops.broadcast_to(s, scores.shape[:-1] + (1,)), scores], axis=-1)
    p = ops.softmax(scores, axis=-1, precise=True)
    if sinks is not None:
        p = p[..., 1:]
    o = ops.matmul(p, v)
    return ops.flatten(o, 1, 2) if rep > 1 else o


# ---- custom kernels -------------------------------------------------------------------------

def _check_names(op, **lists):
    for what, names in lists.items():
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"[{op}] {what} must be a list of str, got {names!r}")


class _ForeignKernel:
    """A kernel written in another platform's source language: it can be made (as in MLX
    on a machine without that back-end) but not run, since mirax generates all its
    kernels from its own IR."""

    def __init__(self, op, backend, name):
        self.op, self.backend, self.name = op, backend, name

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
                 init_value=None, verbose=False, stream=None):
        from . import device
        if stream is not None and device._as_device(stream).type is device.DeviceType.cpu:
            raise ValueError(f"[{self.op}] Only supports the GPU.")
        raise RuntimeError(f"[{self.op}] No {self.backend} back-end: mirax cannot run custom {self.backend} source "
                           f"(kernel {self.name!r}); write the kernel with mirax ops and mr.compile it instead.")


def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                 atomic_outputs=False, compile_options=None):
    """MLX's custom Metal kernel from source. The kernel object is made as in MLX, but
    calling it raises RuntimeError ("No Metal back-end"), as MLX does where Metal is
    absent: mirax emits its Metal from its own IR (SPIR-V through SPIRV-Cross) and cannot
    run hand-written Metal Shading Language."""
    _check_names("metal_kernel", input_names=input_names, output_names=output_names)
    return _ForeignKernel("metal_kernel", "Metal", name)


def cuda_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                shared_memory=0):
    """MLX's custom CUDA kernel from source: made as in MLX, but calling it raises
    RuntimeError ("No CUDA back-end"), as MLX does without CUDA: mirax emits PTX from its
    own IR and cannot compile CUDA C++."""
    _check_names("cuda_kernel", input_names=input_names, output_names=output_names)
    return _ForeignKernel("cuda_kernel", "CUDA", name)


def precompiled_cuda_kernel(*, name, compiled_source, inputs, output_shapes, output_dtypes, scalars, grid,
                            threadgroup, shared_memory=0, init_value=None, ensure_row_contiguous=False,
                            stream=None):
    """MLX's precompiled CUDA kernel: raises RuntimeError, as MLX without its CUDA back-end."""
    raise RuntimeError(f"[cuda_kernel] No CUDA back-end: mirax cannot run precompiled CUDA code (kernel {name!r}).")


def cross_entropy(logits, targets, *, stream=None) -> Array:
    """logsumexp(logits, -1) - logits[..., targets], float32, shaped as `targets` (integer
    class indices in [0, logits.shape[-1])); reduced in the logits' dtype, as MLX's CPU:

        mr.fast.cross_entropy(mr.array([[0.0, 0.0]]), mr.array([1]))   # [log 2]
    """
    with _on(stream):
        logits, targets = asarray(logits), asarray(targets)
        if logits.ndim == 0:
            raise _err("cross_entropy", "logits must have at least 1 dimension but got input with 0 dimensions.")
        if logits.dtype.kind != "f":
            raise _err("cross_entropy", f"Received unsupported logits type {logits.dtype.name}.")
        if targets.dtype.kind not in "iu":
            raise _err("cross_entropy", f"targets must be integer class indices but got {targets.dtype.name}.")
        if targets.shape != logits.shape[:-1]:
            raise _err("cross_entropy", f"targets shape {targets.shape} does not match logits shape "
                                        f"{logits.shape} with the last axis removed.")
        picked = ops.take_along_axis(logits, ops.expand_dims(targets, -1), axis=-1)[..., 0]
        return (ops.logsumexp(logits, axis=-1) - picked).astype(dt.float32)


def gated_delta_update(q, k, v, gamma, beta, initial_state=None, mask=None, stream=None):
    """The gated delta rule over T steps (Qwen3-Next's linear attention), as MLX's fallback:
    per step S <- gamma S; S <- S + k (beta (v - S k))^T; y = S q, for q, k (B, T, Hk, Dk),
    v (B, T, Hv, Dv), gamma and beta (B, T, Hv), the state S (B, Hv, Dv, Dk) in float32
    (zeros unless `initial_state`), Hv a multiple of Hk (q, k repeat over the heads).
    A step where `mask` (B, T) is False keeps the state and outputs 0. Returns
    [y (B, T, Hv, Dv), the final state]:

        y, state = mr.fast.gated_delta_update(q, k, v, gamma, beta)
    """
    op = "gated_delta_update"
    with _on(stream):
        q, k, v, gamma, beta = (asarray(a) for a in (q, k, v, gamma, beta))
        if q.ndim != 4 or k.shape != q.shape:
            raise _err(op, f"q and k must have the same shape (B, T, Hk, Dk) but got {q.shape} and {k.shape}.")
        B, T, Hk, Dk = q.shape
        if v.ndim != 4 or v.shape[:2] != (B, T) or v.shape[2] % max(Hk, 1):
            raise _err(op, f"v must have shape (B, T, Hv, Dv) with Hv a multiple of Hk = {Hk} but got {v.shape}.")
        Hv, Dv = v.shape[2:]
        for name, a in (("gamma", gamma), ("beta", beta)):
            if a.shape != (B, T, Hv):
                raise _err(op, f"{name} must have shape {(B, T, Hv)} but got {a.shape}.")
        if mask is not None:
            mask = asarray(mask)
            if mask.shape != (B, T) or mask.dtype is not dt.bool_:
                raise _err(op, f"mask must be a bool array of shape {(B, T)} but got {mask.dtype.name} {mask.shape}.")
        out_dtype = result_type(q, k, v)
        f32 = dt.float32
        if Hv != Hk:
            q, k = ops.repeat(q, Hv // Hk, axis=2), ops.repeat(k, Hv // Hk, axis=2)
        if initial_state is None:
            state = ops.zeros((B, Hv, Dv, Dk), f32)
        else:
            state = asarray(initial_state)
            if state.shape != (B, Hv, Dv, Dk):
                raise _err(op, f"initial_state must have shape {(B, Hv, Dv, Dk)} but got {state.shape}.")
        if T == 0:
            return [ops.zeros((B, 0, Hv, Dv), out_dtype), state.astype(f32)]
        args = [q, k, v, gamma, beta, state] + ([] if mask is None else [mask])
        y, state = _compiled(_gated_delta_steps, mask is not None)(*args)
        return [y.astype(out_dtype), state]


def _gated_delta_steps(masked, q, k, v, gamma, beta, state, mask=None):
    """The recurrence of gated_delta_update, q and k already repeated to v's heads."""
    f32 = dt.float32
    q, k, v, gamma, beta, state = (a.astype(f32) for a in (q, k, v, gamma, beta, state))
    ys = []
    for t in range(q.shape[1]):
        kt = ops.expand_dims(k[:, t], 2)                                         # (B, Hv, 1, Dk)
        new = state * gamma[:, t, :, None, None]
        delta = (v[:, t] - ops.sum(new * kt, axis=-1)) * beta[:, t, :, None]    # (B, Hv, Dv)
        new = new + kt * ops.expand_dims(delta, -1)
        y = ops.sum(new * ops.expand_dims(q[:, t], 2), axis=-1)                 # (B, Hv, Dv)
        if masked:
            keep = mask[:, t, None, None]
            new = ops.where(ops.expand_dims(keep, -1), new, state)
            y = ops.where(keep, y, 0.0)
        state = new
        ys.append(y)
    return ops.stack(ys, axis=1), state


_COMPILED: dict = {}


def _compiled(fn, *params):
    """`fn` with its leading static `params` bound, compiled once: eagerly one fused kernel
    per shape instead of one per op (inside a trace it is inlined)."""
    import functools
    key = (fn, params)
    if key not in _COMPILED:
        from .compile import compile
        _COMPILED[key] = compile(functools.partial(fn, *params))
    return _COMPILED[key]


__all__ += ["cross_entropy", "gated_delta_update"]


def _on(stream):
    from . import device
    import contextlib
    return contextlib.nullcontext() if stream is None else device.stream(stream)
