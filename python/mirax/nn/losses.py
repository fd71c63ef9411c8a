"""Loss functions, as `mlx.nn.losses` (same formulas, defaults and reductions).

Every loss takes `reduction` in {"none", "mean", "sum"}; the default differs per loss
exactly as in MLX (e.g. cross_entropy "none", mse_loss "mean").
"""
from __future__ import annotations

import math
from typing import Literal, get_args

from .. import ops as mr
from ..array import Array, array

__all__ = ["cross_entropy", "binary_cross_entropy", "l1_loss", "mse_loss", "nll_loss", "gaussian_nll_loss",
           "kl_div_loss", "smooth_l1_loss", "triplet_loss", "hinge_loss", "huber_loss", "log_cosh_loss",
           "cosine_similarity_loss", "margin_ranking_loss"]

Reduction = Literal["none", "mean", "sum"]


def _a(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def _reduce(loss, reduction: Reduction = "none"):
    if reduction not in get_args(Reduction):
        raise ValueError(f"Invalid reduction. Must be one of {get_args(Reduction)}.")
    if reduction == "mean":
        return mr.mean(loss)
    if reduction == "sum":
        return mr.sum(loss)
    return loss


def _logaddexp0(x):
    return mr.maximum(x, 0) + mr.log1p(mr.exp(-mr.abs(x)))


def _weigh(loss, weights):
    if weights is None:
        return loss
    weights = _a(weights)
    if tuple(weights.shape) != tuple(loss.shape):
        raise ValueError(f"Weights with shape {weights.shape} is not the same as "
                         f"output loss with shape {loss.shape}.")
    return loss * weights


def cross_entropy(logits, targets, weights=None, axis: int = -1, label_smoothing: float = 0.0,
                  reduction: Reduction = "none"):
    """Cross entropy of softmax(logits) along `axis` against class indices (targets with
    `axis` removed) or probabilities (targets shaped like logits)."""
    logits, targets = _a(logits), _a(targets)
    if label_smoothing < 0 or label_smoothing >= 1:
        raise ValueError(f"Label smoothing must be in [0, 1), got {label_smoothing}.")
    as_probs = targets.ndim == logits.ndim
    dropped = list(logits.shape)
    dropped.pop(axis)
    if (as_probs and tuple(targets.shape) != tuple(logits.shape)) or \
            (not as_probs and tuple(targets.shape) != tuple(dropped)):
        raise ValueError(f"Targets shape {targets.shape} does not match logits shape {logits.shape}.")
    logits = logits - mr.stop_gradient(mr.max(logits, axis=axis, keepdims=True))
    if as_probs:
        score = mr.sum(logits * targets, axis=axis)
    else:
        score = mr.take_along_axis(logits, mr.expand_dims(targets, axis), axis).squeeze(axis)
    lse = mr.logsumexp(logits, axis=axis)
    if label_smoothing > 0:
        adjusted = (1 - label_smoothing) * score
        smoothed = -mr.mean(logits, axis=axis) * label_smoothing
        loss = lse - adjusted + smoothed
    else:
        loss = lse - score
    return _reduce(_weigh(loss, weights), reduction)


def binary_cross_entropy(inputs, targets, weights=None, with_logits: bool = True,
                         reduction: Reduction = "mean"):
    """Binary cross entropy of logits (default) or probabilities (`with_logits=False`,
    log-probabilities clipped at -100) against targets in {0, 1}."""
    inputs, targets = _a(inputs), _a(targets)
    if tuple(inputs.shape) != tuple(targets.shape):
        raise ValueError(f"Inputs shape {inputs.shape} does not match targets shape {targets.shape}.")
    if with_logits:
        loss = _logaddexp0(inputs) - inputs * targets
    else:
        log_p = mr.maximum(mr.log(inputs), -100)
        log_q = mr.maximum(mr.log(1 - inputs), -100)
        loss = -(targets * log_p + (1 - targets) * log_q)
    return _reduce(_weigh(loss, weights), reduction)


def _same_shape(p, t, a="Predictions", b="targets"):
    if tuple(p.shape) != tuple(t.shape):
        raise ValueError(f"{a} shape {p.shape} does not match {b} shape {t.shape}.")


def l1_loss(predictions, targets, reduction: Reduction = "mean"):
    """|predictions - targets|."""
    predictions, targets = _a(predictions), _a(targets)
    _same_shape(predictions, targets)
    return _reduce(mr.abs(predictions - targets), reduction)


def mse_loss(predictions, targets, reduction: Reduction = "mean"):
    """(predictions - targets) ** 2."""
    predictions, targets = _a(predictions), _a(targets)
    _same_shape(predictions, targets)
    return _reduce(mr.square(predictions - targets), reduction)


def nll_loss(inputs, targets, axis: int = -1, reduction: Reduction = "none"):
    """-inputs[target] along `axis` (inputs are log-probabilities)."""
    inputs, targets = _a(inputs), _a(targets)
    loss = -mr.take_along_axis(inputs, mr.expand_dims(targets, axis), axis).squeeze(axis)
    return _reduce(loss, reduction)


def gaussian_nll_loss(inputs, targets, vars, full: bool = False, eps: float = 1e-6,
                      reduction: Reduction = "mean"):
    """0.5 * (log(max(vars, eps)) + (inputs - targets)**2 / max(vars, eps)) (+ 0.5 log(2 pi) if full)."""
    inputs, targets, vars = _a(inputs), _a(targets), _a(vars)
    _same_shape(inputs, targets, "Inputs")
    _same_shape(inputs, vars, "Inputs", "vars")
    vars = mr.maximum(vars, eps)
    loss = 0.5 * (mr.log(vars) + mr.square(targets - inputs) / vars)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def kl_div_loss(inputs, targets, axis: int = -1, reduction: Reduction = "none"):
    """sum(exp(targets) * (targets - inputs), axis), both log-probabilities."""
    inputs, targets = _a(inputs), _a(targets)
    return _reduce(mr.sum(mr.exp(targets) * (targets - inputs), axis=axis), reduction)


def smooth_l1_loss(predictions, targets, beta: float = 1.0, reduction: Reduction = "mean"):
    """0.5 d**2 / beta where d = |p - t| < beta, d - 0.5 beta elsewhere."""
    predictions, targets = _a(predictions), _a(targets)
    _same_shape(predictions, targets)
    diff = mr.abs(predictions - targets)
    loss = mr.where(diff < beta, 0.5 * mr.square(diff) / beta, diff - 0.5 * beta)
    return _reduce(loss, reduction)


def triplet_loss(anchors, positives, negatives, axis: int = -1, p: int = 2, margin: float = 1.0,
                 eps: float = 1e-6, reduction: Reduction = "none"):
    """max(||a - p||_p - ||a - n||_p + margin, 0)."""
    anchors, positives, negatives = _a(anchors), _a(positives), _a(negatives)
    pos = mr.power(mr.power(mr.abs(anchors - positives), p).sum(axis) + eps, 1.0 / p)
    neg = mr.power(mr.power(mr.abs(anchors - negatives), p).sum(axis) + eps, 1.0 / p)
    return _reduce(mr.maximum(pos - neg + margin, 0), reduction)


def hinge_loss(inputs, targets, reduction: Reduction = "none"):
    """max(0, 1 - inputs * targets), targets in {-1, 1}."""
    inputs, targets = _a(inputs), _a(targets)
    return _reduce(mr.maximum(1 - inputs * targets, 0), reduction)


def huber_loss(inputs, targets, delta: float = 1.0, reduction: Reduction = "none"):
    """0.5 a**2 for |a| <= delta, delta (|a| - 0.5 delta) elsewhere (a = inputs - targets)."""
    inputs, targets = _a(inputs), _a(targets)
    abs_err = mr.abs(inputs - targets)
    quadratic = mr.minimum(abs_err, delta)
    linear = abs_err - quadratic
    return _reduce(0.5 * quadratic ** 2 + delta * linear, reduction)


def log_cosh_loss(inputs, targets, reduction: Reduction = "none"):
    """log(cosh(inputs - targets)), computed as logaddexp(e, -e) - log 2."""
    inputs, targets = _a(inputs), _a(targets)
    errors = inputs - targets
    loss = mr.abs(errors) + mr.log1p(mr.exp(-2 * mr.abs(errors))) - math.log(2)
    return _reduce(loss, reduction)


def cosine_similarity_loss(x1, x2, axis: int = 1, eps: float = 1e-8, reduction: Reduction = "none"):
    """x1 . x2 / max(||x1|| ||x2||, eps) along `axis`."""
    x1, x2 = _a(x1), _a(x2)
    x1_norm = mr.sqrt(mr.sum(mr.square(x1), axis=axis))
    x2_norm = mr.sqrt(mr.sum(mr.square(x2), axis=axis))
    loss = mr.sum(x1 * x2, axis=axis) / mr.maximum(x1_norm * x2_norm, eps)
    return _reduce(loss, reduction)


def margin_ranking_loss(inputs1, inputs2, targets, margin: float = 0.0, reduction: Reduction = "none"):
    """max(0, -targets * (inputs1 - inputs2) + margin)."""
    inputs1, inputs2, targets = _a(inputs1), _a(inputs2), _a(targets)
    if not (tuple(inputs1.shape) == tuple(inputs2.shape) == tuple(targets.shape)):
        raise ValueError(f"The shapes of the arguments do not match. The provided shapes are "
                         f"inputs1.shape={inputs1.shape}, inputs2.shape={inputs2.shape}, and "
                         f"targets.shape={targets.shape}.")
    loss = mr.maximum(0, -targets * (inputs1 - inputs2) + margin)
    return _reduce(loss, reduction)
