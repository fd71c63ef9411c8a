"""Activation functions and their Module classes, as `mlx.nn` (same formulas)."""
from __future__ import annotations

import math
from typing import Any

from ... import ops as mr
from ...array import Array, array
from ...fused import fused
from .base import Module

__all__ = ["sigmoid", "relu", "relu2", "relu6", "leaky_relu", "log_softmax", "elu", "softmax", "softplus",
           "softsign", "softshrink", "celu", "silu", "log_sigmoid", "gelu", "gelu_approx", "gelu_fast_approx",
           "glu", "step", "selu", "prelu", "mish", "hardswish", "hard_tanh", "hard_shrink", "softmin", "tanh",
           "GLU", "Sigmoid", "Mish", "ReLU", "ReLU2", "ReLU6", "LeakyReLU", "ELU", "Softmax", "Softplus",
           "Softsign", "Softshrink", "CELU", "SiLU", "LogSoftmax", "LogSigmoid", "PReLU", "GELU", "Tanh",
           "Hardswish", "Step", "SELU", "HardTanh", "HardShrink", "Softmin"]


def _a(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def sigmoid(x):
    r"""Elementwise logistic sigmoid :math:`1 / (1 + e^{-x})`."""
    return mr.sigmoid(x)


def relu(x):
    """max(x, 0)."""
    return mr.maximum(x, 0)


@fused
def relu2(x):
    """max(x, 0) ** 2."""
    return mr.square(mr.maximum(x, 0))


@fused
def relu6(x):
    """min(max(x, 0), 6)."""
    return mr.minimum(mr.maximum(x, 0), 6.0)


@fused
def leaky_relu(x, negative_slope=0.01):
    """max(negative_slope * x, x)."""
    return mr.maximum(negative_slope * _a(x), x)


@fused
def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis` (shifted by the max first)."""
    x = _a(x)
    x = x - mr.stop_gradient(mr.max(x, axis=axis, keepdims=True))
    return x - mr.logsumexp(x, axis=axis, keepdims=True)


@fused
def elu(x, alpha=1.0):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    x = _a(x)
    return mr.where(x > 0, x, alpha * (mr.exp(x) - 1))


def softmax(x, axis=-1):
    return mr.softmax(_a(x), axis=axis)


def _logaddexp0(x):
    """log(1 + exp(x)), stable: max(x, 0) + log1p(exp(-|x|))."""
    return mr.maximum(x, 0) + mr.log1p(mr.exp(-mr.abs(x)))


@fused
def softplus(x):
    """log(1 + exp(x))."""
    return _logaddexp0(_a(x))


@fused
def softsign(x):
    """x / (1 + |x|)."""
    x = _a(x)
    return x / (1 + mr.abs(x))


@fused
def softshrink(x, lambd: float = 0.5):
    x = _a(x)
    return mr.where(mr.abs(x) > lambd, x - mr.sign(x) * lambd, 0)


@fused
def celu(x, alpha=1.0):
    x = _a(x)
    return mr.maximum(x, 0.0) + alpha * (mr.exp(mr.minimum(x, 0.0) / alpha) - 1)


@fused
def silu(x):
    """x * sigmoid(x)."""
    x = _a(x)
    return x * mr.sigmoid(x)


@fused
def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x)."""
    return -softplus(-_a(x))


@fused
def gelu(x):
    """x * Phi(x) with the exact Gaussian CDF."""
    x = _a(x)
    return x * (1 + mr.erf(x / math.sqrt(2))) / 2


@fused
def gelu_approx(x):
    """The tanh approximation of gelu."""
    x = _a(x)
    return 0.5 * x * (1 + mr.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@fused
def gelu_fast_approx(x):
    """x * sigmoid(1.702 x)."""
    x = _a(x)
    return x * mr.sigmoid(1.702 * x)


@fused
def glu(x, axis: int = -1):
    """a * sigmoid(b) with a, b the halves of x along `axis`."""
    a, b = mr.split(_a(x), 2, axis=axis)
    return a * mr.sigmoid(b)


def step(x, threshold: float = 0.0):
    """1 where x >= threshold, else 0 (int32)."""
    return mr.where(_a(x) >= threshold, 1, 0)


@fused
def selu(x):
    return elu(x, 1.67326) * 1.0507


def prelu(x, alpha):
    return mr.maximum(0, x) + alpha * mr.minimum(0, x)


@fused
def mish(x):
    """x * tanh(softplus(x))."""
    x = _a(x)
    return x * mr.tanh(softplus(x))


@fused
def hardswish(x):
    x = _a(x)
    return x * mr.minimum(mr.maximum(x + 3, 0), 6) / 6


@fused
def hard_tanh(x, min_val=-1.0, max_val=1.0):
    return mr.minimum(mr.maximum(x, min_val), max_val)


@fused
def hard_shrink(x, lambd=0.5):
    x = _a(x)
    return mr.where(mr.abs(x) > lambd, x, 0)


@fused
def softmin(x, axis=-1):
    return mr.softmax(-_a(x), axis=axis)


def tanh(x):
    return mr.tanh(x)


def _make_activation_module(f):
    def decorator(klass):
        klass.__call__ = lambda _, x: f(x)
        klass.__doc__ = klass.__doc__ or f"Applies :func:`{f.__name__}` elementwise."
        return klass
    return decorator


class GLU(Module):
    def __init__(self, axis: int = -1):
        super().__init__()
        self.axis = axis

    def __call__(self, x) -> Any:
        return glu(x=x, axis=self.axis)


@_make_activation_module(sigmoid)
class Sigmoid(Module):
    pass


@_make_activation_module(mish)
class Mish(Module):
    pass


@_make_activation_module(relu)
class ReLU(Module):
    pass


@_make_activation_module(relu2)
class ReLU2(Module):
    pass


@_make_activation_module(relu6)
class ReLU6(Module):
    pass


class LeakyReLU(Module):
    def __init__(self, negative_slope=1e-2):
        super().__init__()
        self._negative_slope = negative_slope

    def __call__(self, x):
        return leaky_relu(x, self._negative_slope)


class ELU(Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self._alpha = alpha

    def __call__(self, x):
        return elu(x, self._alpha)


@_make_activation_module(softmax)
class Softmax(Module):
    pass


@_make_activation_module(softplus)
class Softplus(Module):
    pass


@_make_activation_module(softsign)
class Softsign(Module):
    pass


class Softshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def __call__(self, x):
        return softshrink(x, self.lambd)


class CELU(Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self._alpha = alpha

    def __call__(self, x):
        return celu(x, self._alpha)


@_make_activation_module(silu)
class SiLU(Module):
    pass


@_make_activation_module(log_softmax)
class LogSoftmax(Module):
    pass


@_make_activation_module(log_sigmoid)
class LogSigmoid(Module):
    pass


class PReLU(Module):
    """max(0, x) + weight * min(0, x) with a learnt `weight` (init 0.25)."""

    def __init__(self, num_parameters=1, init=0.25):
        super().__init__()
        self.weight = mr.full([num_parameters], init)

    def __call__(self, x):
        return prelu(x, self.weight)


class GELU(Module):
    """gelu; `approx` in {"none", "precise"/"tanh" (gelu_approx), "fast" (gelu_fast_approx)}."""

    def __init__(self, approx="none"):
        super().__init__()
        allowed = ["none", "precise", "tanh", "fast"]
        if approx not in allowed:
            raise ValueError(f"The approximation should be in {allowed} but '{approx}' was given")
        self._approx = approx

    def __call__(self, x):
        if self._approx == "none":
            return gelu(x)
        if self._approx in ("precise", "tanh"):
            return gelu_approx(x)
        return gelu_fast_approx(x)


@_make_activation_module(tanh)
class Tanh(Module):
    pass


@_make_activation_module(hardswish)
class Hardswish(Module):
    pass


class Step(Module):
    def __init__(self, threshold: float = 0.0):
        super().__init__()
        self.threshold = threshold

    def __call__(self, x):
        return step(x, self.threshold)


@_make_activation_module(selu)
class SELU(Module):
    pass


@_make_activation_module(hard_tanh)
class HardTanh(Module):
    pass


class HardShrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def __call__(self, x):
        return hard_shrink(x, self.lambd)


@_make_activation_module(softmin)
class Softmin(Module):
    pass
