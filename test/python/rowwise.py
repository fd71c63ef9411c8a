"""The row-wise functions the CPU code generator fuses into one row loop
(lowering/fuse_reductions.py) and their numpy references in float64, shared by
test_rowwise_kernels.py and test_cpu_codegen.py.

    from rowwise import ROWWISE
    fun, ref = ROWWISE["softmax"]
"""
import numpy as np

import mirax as mr


def softmax(x):
    return mr.softmax(x, axis=-1)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def logsumexp(x):
    return mr.logsumexp(x, axis=-1)


def np_logsumexp(x):
    m = x.max(-1, keepdims=True)
    m = np.where(np.isinf(m), 0, m)  # as mirax (and scipy): all -inf gives -inf
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - m).sum(-1, keepdims=True)) + m)[..., 0]


def layer_norm(x):
    m = mr.mean(x, axis=-1, keepdims=True)
    d = x - m
    return d * mr.rsqrt(mr.mean(d * d, axis=-1, keepdims=True) + 1e-5)


def np_layer_norm(x):
    d = x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)


ROWWISE = {"softmax": (softmax, np_softmax), "layer_norm": (layer_norm, np_layer_norm),
           "logsumexp": (logsumexp, np_logsumexp)}
