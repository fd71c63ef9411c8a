"""Optimizers and learning-rate schedules, as `mlx.optimizers`.

    import mirax as mr
    import mirax.optimizers as optim

    opt = optim.AdamW(learning_rate=optim.cosine_decay(1e-3, 1000))
    loss, grads = mr.value_and_grad(loss_fn)(params, x, y)
    params = opt.apply_gradients(grads, params)      # or opt.update(model, grads)
    mr.eval(params, opt.state)
"""
from .optimizers import (AdaDelta, Adafactor, Adagrad, Adam, Adamax, AdamW, Lion, MultiOptimizer,  # noqa: F401
                         Muon, Optimizer, RMSprop, SGD, clip_grad_norm)
from .schedulers import cosine_decay, exponential_decay, join_schedules, linear_schedule, step_decay  # noqa: F401

__all__ = ["Optimizer", "MultiOptimizer", "SGD", "RMSprop", "Adagrad", "AdaDelta", "Adam", "AdamW", "Adamax",
           "Lion", "Adafactor", "Muon", "clip_grad_norm", "exponential_decay", "step_decay", "cosine_decay",
           "join_schedules", "linear_schedule"]
