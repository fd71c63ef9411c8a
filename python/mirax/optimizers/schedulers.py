"""Learning-rate schedules with the signatures of `mlx.optimizers`.

A schedule is a callable `step -> value`. Give one to an optimizer as its
`learning_rate` and it is evaluated with the optimizer's step count (an array)
before each update, so the value is part of `optimizer.state`:

    warmup = optim.linear_schedule(0.0, 1e-1, steps=10)
    cosine = optim.cosine_decay(1e-1, 200)
    opt = optim.Adam(learning_rate=optim.join_schedules([warmup, cosine], [10]))

Schedules accept a step as an array or a Python int and return a 0-d array.
"""
from __future__ import annotations

import math
from typing import Callable, List

from ..array import Array, array
from .. import ops

__all__ = ["exponential_decay", "step_decay", "cosine_decay", "join_schedules", "linear_schedule"]


def _step(step):
    return step if isinstance(step, Array) else array(step)


def exponential_decay(init: float, decay_rate: float) -> Callable:
    """`init * decay_rate ** step`.

        >>> lr = optim.exponential_decay(1e-1, 0.9)
        >>> lr(5)   # 0.1 * 0.9**5 = 0.059049
    """

    def schedule(step):
        return init * decay_rate ** _step(step)

    return schedule


def step_decay(init: float, decay_rate: float, step_size: int) -> Callable:
    """`init * decay_rate ** (step // step_size)`: decay every `step_size` steps."""

    def schedule(step):
        return init * (decay_rate ** (_step(step) // step_size))

    return schedule


def cosine_decay(init: float, decay_steps: int, end: float = 0.0) -> Callable:
    """Cosine decay from `init` to `end` over `decay_steps`; constant `end` after.

    `end + (init - end) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps))`
    """

    def schedule(step):
        s = ops.minimum(_step(step), decay_steps)
        decay = 0.5 * (1.0 + ops.cos((math.pi / decay_steps) * s))
        return end + decay * (init - end)

    return schedule


def join_schedules(schedules: List[Callable], boundaries: List[int]) -> Callable:
    """Schedule `i + 1` takes over at `boundaries[i]`, receiving `step - boundaries[i]`.

        >>> warmup = optim.linear_schedule(0, 1e-1, steps=10)
        >>> cosine = optim.cosine_decay(1e-1, 200)
        >>> lr = optim.join_schedules([warmup, cosine], [10])
    """
    if len(schedules) == 0:
        raise ValueError("Must provide at least 1 schedule to join.")
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(f"Received {len(boundaries)} boundaries but expected {len(schedules) - 1}.")

    def schedule(step):
        step = _step(step)
        output = schedules[0](step)
        for boundary, sched in zip(boundaries, schedules[1:]):
            # Where step < boundary the (possibly wrapped-around) shifted step is discarded.
            output = ops.where(step < boundary, output, sched(step - boundary))
        return output

    return schedule


def linear_schedule(init: float, end: float, steps: int) -> Callable:
    """Linear from `init` (step 0) to `end` (step `steps`); constant `end` after."""
    if steps < 1:
        raise ValueError(f"steps must be greater than 0, but got {steps}.")

    def schedule(step):
        step = ops.minimum(_step(step), steps)
        return step * ((end - init) / steps) + init

    return schedule
