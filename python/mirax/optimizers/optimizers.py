"""Optimizers with the semantics and signatures of `mlx.optimizers`.

    opt = optim.Adam(learning_rate=1e-2)
    loss, grads = mr.value_and_grad(loss_fn)(params, x, y)
    params = opt.apply_gradients(grads, params)   # or opt.update(model, grads)

`optimizer.state` is a dict tree holding every array the optimizer reads or
writes: "step" (uint64), "learning_rate" (and any other scheduled value) and, for
each parameter, a dict of its slots ("m", "v", ...) at the parameter's path.
Updates replace the leaves of these dicts in place, so the state can be passed to
a compiled step function as an input and an output.

Parameters and gradients may be any tree of dicts, lists and tuples of arrays, a
`mirax.nn.Module`, or a mix.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple, Union

from ..array import Array, array
from ..dialect import dtypes as dt
from .. import ops
from ..utils import tree_flatten, tree_merge, tree_unflatten

__all__ = ["Optimizer", "MultiOptimizer", "SGD", "RMSprop", "Adagrad", "AdaDelta", "Adam", "AdamW",
           "Adamax", "Lion", "Adafactor", "Muon", "clip_grad_norm"]

_Scalar = Union[float, Array, Callable[[Array], Array]]


# ---- tree helpers (keyed by the gradient tree, so parameters/state may be supersets) -----

def _is_seq(x):
    return isinstance(x, (list, tuple))


def _map_grads(fn, gradients, parameters, state):
    """`fn(g, p, s)` at each leaf of `gradients`; the result has the gradients' structure."""
    if gradients is None:
        return None
    if isinstance(gradients, dict):
        return {k: _map_grads(fn, g, parameters[k], state[k]) for k, g in gradients.items()}
    if _is_seq(gradients):
        out = [_map_grads(fn, g, parameters[i], state[i]) for i, g in enumerate(gradients)]
        return tuple(out) if isinstance(gradients, tuple) else out
    return fn(gradients, parameters, state)


def _init_state(params, state, init_leaf):
    """Grow `state` to mirror `params`; a new leaf gets a dict filled by `init_leaf`."""
    if params is None:
        return state
    if isinstance(params, dict):
        if not isinstance(state, dict):
            state = {}
        for k, v in params.items():
            state[k] = _init_state(v, state.get(k), init_leaf)
        return state
    if _is_seq(params):
        state = list(state) if _is_seq(state) else []
        for i, p in enumerate(params):
            if i < len(state):
                state[i] = _init_state(p, state[i], init_leaf)
            else:
                state.append(_init_state(p, None, init_leaf))
        return tuple(state) if isinstance(params, tuple) else state
    if not isinstance(state, dict):
        state = {}
    if not state:
        init_leaf(params, state)
    return state


def _update_in_place(target, new):
    """Write the leaves of `new` into the dict/list tree `target` (a plain-tree model)."""
    if isinstance(new, dict):
        for k, v in new.items():
            if v is None:
                continue
            if isinstance(v, (dict, list)) and isinstance(target.get(k), (dict, list)):
                _update_in_place(target[k], v)
            elif isinstance(v, tuple) and isinstance(target.get(k), tuple):
                target[k] = _replace_tuple(target[k], v)
            else:
                target[k] = v
        return
    for i, v in enumerate(new):
        if v is None:
            continue
        if isinstance(v, (dict, list)) and isinstance(target[i], (dict, list)):
            _update_in_place(target[i], v)
        elif isinstance(v, tuple) and isinstance(target[i], tuple):
            target[i] = _replace_tuple(target[i], v)
        else:
            target[i] = v


def _replace_tuple(old, new):
    items = list(old)
    _update_in_place(items, list(new))
    return type(old)(*items) if hasattr(type(old), "_fields") else type(old)(items)


def _as_array(x):
    return x if isinstance(x, Array) else array(x)


# ---- the base class ----------------------------------------------------------------------

class Optimizer:
    """The base class: an optimizer defined per parameter, applied to a parameter tree.

    Subclasses implement `init_single(parameter, state)` (fill the parameter's state
    dict) and `apply_single(gradient, parameter, state)` (return the new parameter,
    writing new slot values into `state`).
    """

    def __init__(self, schedulers=None):
        self._initialized = False
        self._state = {"step": array(0, dt.uint64)}
        self._schedulers = {k: v for k, v in (schedulers or {}).items()}

    def update(self, model, gradients):
        """Apply `gradients` to the parameters of `model` and write the new values back.

        `model` is a `mirax.nn.Module` (anything with an `update(params)` method) or a
        plain dict/list tree of arrays, which is updated in place.
        """
        new = self.apply_gradients(gradients, model)
        if type(model) in (dict, list):
            _update_in_place(model, new)
        elif hasattr(model, "update"):
            model.update(new)
        else:
            raise TypeError(f"cannot update a {type(model).__name__} in place; "
                            "use `params = optimizer.apply_gradients(grads, params)`")

    def init(self, parameters):
        """Create the state for `parameters` (optional: the first update does it).

            >>> opt = optim.SGD(learning_rate=1e-1, momentum=0.9)
            >>> opt.init({"w": w, "b": b})
            >>> opt.state.keys()
            dict_keys(['step', 'learning_rate', 'w', 'b'])
        """
        _init_state(parameters, self._state, self.init_single)
        self._initialized = True

    def init_single(self, parameter: Array, state: dict):
        """Fill `state` (the parameter's empty slot dict); subclasses implement it."""
        raise NotImplementedError()

    def apply_gradients(self, gradients, parameters):
        """Return the updated parameters (with the structure of `gradients`).

        `parameters` may be a superset of `gradients`. Evaluates the schedules at the
        current step, increments the step, then updates each parameter.
        """
        if not self._initialized:
            self.init(gradients)
        for name, scheduler in self._schedulers.items():
            self.state[name] = _as_array(scheduler(self.step))
        self.state["step"] = self.step + 1
        return _map_grads(self.apply_single, gradients, parameters, self.state)

    def apply_single(self, gradient: Array, parameter: Array, state: dict):
        """Return the updated `parameter`; subclasses implement it."""
        raise NotImplementedError()

    @property
    def state(self):
        """The optimizer's state dict (step, learning rate, per-parameter slots)."""
        return self._state

    @state.setter
    def state(self, state: dict):
        self._initialized = False
        self._state = state

    @property
    def step(self):
        return self.state["step"]

    @property
    def learning_rate(self):
        return self.state["learning_rate"]

    @learning_rate.setter
    def learning_rate(self, learning_rate: _Scalar):
        self._maybe_schedule("learning_rate", learning_rate)

    def _maybe_schedule(self, name: str, param: _Scalar):
        """Store `param` in the state; a callable becomes a schedule of the step."""
        if callable(param) and not isinstance(param, Array):
            self._schedulers[name] = param
            value = _as_array(param(self.step))
        else:
            self._schedulers.pop(name, None)
            value = _as_array(param)
        self.state[name] = value


class MultiOptimizer(Optimizer):
    """Different optimizers for different parameters.

    `filters[i](path, gradient)` selects the parameters of `optimizers[i]`; the last
    optimizer takes the rest and has no filter. Paths are dotted (`"layers.0.weight"`).
    """

    def __init__(self, optimizers, filters: list = []):
        super().__init__()
        self._state = {}
        if len(filters) != len(optimizers) - 1:
            raise ValueError(f"Given {len(filters)} filters but {len(optimizers) - 1} needed.")
        self.optimizers = optimizers
        self.filters = list(filters) + [lambda *args, **kwargs: True]

    def _split_dictionary(self, gradients):
        if len(self.optimizers) == 1:
            return [gradients]
        parts = [[] for _ in self.optimizers]
        for k, g in tree_flatten(gradients):
            for i, fn in enumerate(self.filters):
                if fn(k, g):
                    parts[i].append((k, g))
                    break
        return [tree_unflatten(p) if p else {} for p in parts]

    def init(self, parameters):
        for o, p in zip(self.optimizers, self._split_dictionary(parameters)):
            o.init(p)

    def apply_gradients(self, gradients, parameters):
        tree = {}
        for o, g in zip(self.optimizers, self._split_dictionary(gradients)):
            tree = tree_merge(tree, o.apply_gradients(g, parameters))
        return tree

    @property
    def state(self):
        return {"states": [o.state for o in self.optimizers]}

    @state.setter
    def state(self, state: dict):
        if "states" not in state or len(state["states"]) != len(self.optimizers):
            raise ValueError("Invalid state provided")
        for o, s in zip(self.optimizers, state["states"]):
            o.state = s

    @property
    def step(self):
        return self.optimizers[0].step

    @property
    def learning_rate(self):
        return self.optimizers[0].learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        for o in self.optimizers:
            o.learning_rate = learning_rate


# ---- optimizers --------------------------------------------------------------------------

class SGD(Optimizer):
    r"""Stochastic gradient descent.

        v_{t+1} = mu v_t + (1 - tau) g_t
        w_{t+1} = w_t - lr v_{t+1}            (nesterov: w_t - lr (g_t + mu v_{t+1}))

    with `g_t` including `weight_decay * w_t` (an L2 penalty).

    Args:
        learning_rate (float or callable): the learning rate `lr`.
        momentum (float): the momentum strength `mu`. Default 0.
        weight_decay (float): the L2 penalty. Default 0.
        dampening (float): dampening for momentum `tau`. Default 0.
        nesterov (bool): Nesterov momentum. Default False.
    """

    def __init__(self, learning_rate: _Scalar, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening.")
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.dampening = dampening
        self.nesterov = nesterov

    def init_single(self, parameter, state):
        state["v"] = ops.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        if self.weight_decay != 0:
            gradient = gradient + self.weight_decay * parameter
        lr = self.learning_rate.astype(gradient.dtype)
        if self.momentum <= 0:
            return parameter - lr * gradient
        v = self.momentum * state["v"]
        if self.dampening > 0:
            v = v + (1 - self.dampening) * gradient
        else:
            v = v + gradient
        update = gradient + self.momentum * v if self.nesterov else v
        state["v"] = v
        return parameter - lr * update


class RMSprop(Optimizer):
    r"""RMSprop (Tieleman and Hinton, 2012).

        v_{t+1} = alpha v_t + (1 - alpha) g_t^2
        w_{t+1} = w_t - lr g_t / (sqrt(v_{t+1}) + eps)
    """

    def __init__(self, learning_rate: _Scalar, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.alpha = alpha
        self.eps = eps
        if self.alpha < 0.0:
            raise ValueError(f"RMSprop alpha should be >=0, {self.alpha} was provided instead")
        if self.eps <= 0.0:  # the accumulators start at 0: eps = 0 makes 0 / 0 for a zero gradient
            raise ValueError(f"RMSprop epsilon should be >0, {self.eps} was provided instead")

    def init_single(self, parameter, state):
        state["v"] = ops.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        v = self.alpha * state["v"] + (1 - self.alpha) * ops.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (ops.sqrt(v) + self.eps)


class Adagrad(Optimizer):
    r"""Adagrad (Duchi et al., 2011).

        v_{t+1} = v_t + g_t^2
        w_{t+1} = w_t - lr g_t / (sqrt(v_{t+1}) + eps)
    """

    def __init__(self, learning_rate: _Scalar, eps: float = 1e-8):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.eps = eps
        if self.eps <= 0.0:  # the accumulators start at 0: eps = 0 makes 0 / 0 for a zero gradient
            raise ValueError(f"Adagrad epsilon should be >0, {self.eps} was provided instead")

    def init_single(self, parameter, state):
        state["v"] = ops.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        v = state["v"] + ops.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (ops.sqrt(v) + self.eps)


class AdaDelta(Optimizer):
    r"""AdaDelta (Zeiler, 2012) with a learning rate.

        v_{t+1} = rho v_t + (1 - rho) g_t^2
        d_{t+1} = sqrt(u_t + eps) / sqrt(v_{t+1} + eps) g_t
        u_{t+1} = rho u_t + (1 - rho) d_{t+1}^2
        w_{t+1} = w_t - lr d_{t+1}
    """

    def __init__(self, learning_rate: _Scalar, rho: float = 0.9, eps: float = 1e-6):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.rho = rho
        self.eps = eps
        if self.rho < 0.0:
            raise ValueError(f"AdaDelta rho should be >=0, {self.rho} was provided instead")
        if self.eps <= 0.0:  # the accumulators start at 0: eps = 0 makes 0 / 0 for a zero gradient
            raise ValueError(f"AdaDelta epsilon should be >0, {self.eps} was provided instead")

    def init_single(self, parameter, state):
        state["v"] = ops.zeros_like(parameter)
        state["u"] = ops.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        rho, eps = self.rho, self.eps
        v = rho * state["v"] + (1 - rho) * ops.square(gradient)
        d = ops.sqrt(state["u"] + eps) / ops.sqrt(v + eps) * gradient
        u = rho * state["u"] + (1 - rho) * ops.square(d)
        state["v"] = v
        state["u"] = u
        return parameter - lr * d


class Adam(Optimizer):
    r"""Adam (Kingma and Ba, 2015).

        m_{t+1} = b1 m_t + (1 - b1) g_t
        v_{t+1} = b2 v_t + (1 - b2) g_t^2
        w_{t+1} = w_t - lr m_{t+1} / (sqrt(v_{t+1}) + eps)

    With `bias_correction=True` (as MLX, default False), with t the step after increment:
        w_{t+1} = w_t - lr / (1 - b1^t) m_{t+1} / (sqrt(v_{t+1}) / sqrt(1 - b2^t) + eps)
    """

    def __init__(self, learning_rate: _Scalar, betas: List[float] = [0.9, 0.999], eps: float = 1e-8,
                 bias_correction: bool = False):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.betas = betas
        self.eps = eps
        self.bias_correction = bias_correction

    def init_single(self, parameter, state):
        state["m"] = ops.zeros_like(parameter)
        state["v"] = ops.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        b1, b2 = self.betas
        eps = self.eps
        m = b1 * state["m"] + (1 - b1) * gradient
        v = b2 * state["v"] + (1 - b2) * ops.square(gradient)
        state["m"] = m
        state["v"] = v
        if self.bias_correction:
            step = self.step
            c1 = (1 - b1 ** step).astype(gradient.dtype)
            c2 = ops.sqrt(1 - b2 ** step).astype(gradient.dtype)
            numerator = lr / c1 * m
            denominator = ops.sqrt(v) / c2 + eps
            return parameter - numerator / denominator
        return parameter - lr * m / (ops.sqrt(v) + eps)


class AdamW(Adam):
    r"""AdamW (Loshchilov and Hutter, 2019): Adam with decoupled weight decay.

        w_{t+1} = w_t (1 - lr wd) - lr m_{t+1} / (sqrt(v_{t+1}) + eps)
    """

    def __init__(self, learning_rate: _Scalar, betas: List[float] = [0.9, 0.999], eps: float = 1e-8,
                 weight_decay: float = 0.01, bias_correction: bool = False):
        super().__init__(learning_rate=learning_rate, betas=betas, eps=eps, bias_correction=bias_correction)
        self.weight_decay = weight_decay

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        return super().apply_single(gradient, parameter * (1 - lr * self.weight_decay), state)


class Adamax(Adam):
    r"""Adamax, Adam with the infinity norm (Kingma and Ba, 2015).

        m_{t+1} = b1 m_t + (1 - b1) g_t
        v_{t+1} = max(b2 v_t, |g_t|)
        w_{t+1} = w_t - lr m_{t+1} / (v_{t+1} + eps)
    """

    def __init__(self, learning_rate: _Scalar, betas: List[float] = [0.9, 0.999], eps: float = 1e-8):
        super().__init__(learning_rate, betas, eps)
        if not 0.0 <= eps:
            raise ValueError(f"Epsilon value should be >=0, {self.eps} was provided instead")

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        b1, b2 = self.betas
        m = b1 * state["m"] + (1 - b1) * gradient
        v = ops.maximum(b2 * state["v"], ops.abs(gradient))
        state["m"] = m
        state["v"] = v
        return parameter - lr * m / (v + self.eps)


class Lion(Optimizer):
    r"""Lion (Chen et al., 2023).

        c_{t+1} = b1 m_t + (1 - b1) g_t
        m_{t+1} = b2 m_t + (1 - b2) g_t
        w_{t+1} = w_t (1 - lr wd) - lr sign(c_{t+1})
    """

    def __init__(self, learning_rate: _Scalar, betas: List[float] = [0.9, 0.99], weight_decay: float = 0.0):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.betas = betas
        self.weight_decay = weight_decay

    def init_single(self, parameter, state):
        state["m"] = ops.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        b1, b2 = self.betas
        m = state["m"]
        c = b1 * m + (1 - b1) * gradient
        state["m"] = b2 * m + (1 - b2) * gradient
        if self.weight_decay > 0:
            parameter = (1 - lr * self.weight_decay) * parameter
        return parameter - lr * ops.sign(c)


class Adafactor(Optimizer):
    r"""Adafactor (Shazeer and Stern, 2018), as `mlx.optimizers.Adafactor`.

    Args:
        learning_rate (float or callable, optional): used only when `relative_step`
            is False. Default None.
        eps (tuple): `eps[0]` is added to the squared gradients; `eps[1]` floors the
            parameter RMS when `scale_parameter`. Default (1e-30, 1e-3).
        clip_threshold (float): clips the unscaled update's RMS. Default 1.0.
        decay_rate (float): second-moment decay `beta2 = 1 - step**decay_rate`. Default -0.8.
        beta_1 (float, optional): first-moment coefficient, if given. Default None.
        weight_decay (float): Default 0.
        scale_parameter (bool): scale the step by max(eps[1], RMS(w)). Default True.
        relative_step (bool): step size min(1e-2, 1/sqrt(step)) instead of the
            learning rate. Default True.
        warmup_init (bool): relative step size min(1e-6 step, 1/sqrt(step)). Default False.
    """

    def __init__(self, learning_rate: Optional[_Scalar] = None, eps: Tuple[float, float] = (1e-30, 1e-3),
                 clip_threshold: float = 1.0, decay_rate: float = -0.8, beta_1: Optional[float] = None,
                 weight_decay: float = 0.0, scale_parameter: bool = True, relative_step: bool = True,
                 warmup_init: bool = False):
        super().__init__()
        if learning_rate is not None:
            self._maybe_schedule("learning_rate", learning_rate)
        self.eps = eps
        self.clip_threshold = clip_threshold
        self.decay_rate = decay_rate
        self.beta_1 = beta_1
        self.weight_decay = weight_decay
        self.scale_parameter = scale_parameter
        self.relative_step = relative_step
        self.warmup_init = warmup_init

    def init_single(self, parameter, state):
        if parameter.ndim >= 2:
            shape, dtype = parameter.shape, parameter.dtype
            state["exp_avg_sq_row"] = ops.zeros(shape[:-1], dtype=dtype)
            state["exp_avg_sq_col"] = ops.zeros(shape[:-2] + shape[-1:], dtype=dtype)
        else:
            state["exp_avg_sq"] = ops.zeros_like(parameter)
        if self.beta_1 is not None:
            state["exp_avg"] = ops.zeros_like(parameter)

    @staticmethod
    def _compute_rms(x):
        return ops.sqrt(ops.mean(ops.square(x)))

    def _compute_learning_rate(self, step, parameter_rms):
        if self.relative_step:
            min_step = 1e-6 * step if self.warmup_init else 1e-2
            relative_step_size = ops.minimum(min_step, ops.rsqrt(step))
        else:
            relative_step_size = self.learning_rate
        relative_step_size = relative_step_size.astype(parameter_rms.dtype)
        parameter_scale = 1.0
        if self.scale_parameter:
            parameter_scale = ops.maximum(self.eps[1], parameter_rms)
        return parameter_scale * relative_step_size

    @staticmethod
    def _approximate_exp_moving_avg(exp_avg_sq_row, exp_avg_sq_col):
        r_factor = ops.rsqrt(exp_avg_sq_row / ops.mean(exp_avg_sq_row, axis=-1, keepdims=True))
        c_factor = ops.rsqrt(exp_avg_sq_col)
        # outer product over the last two axes (batched over any leading ones)
        return ops.expand_dims(r_factor, -1) * ops.expand_dims(c_factor, -2)

    def apply_single(self, gradient, parameter, state):
        factored = gradient.ndim >= 2
        step = self.step.astype(dt.float32)
        parameter_rms = self._compute_rms(parameter)
        learning_rate = self._compute_learning_rate(step, parameter_rms)
        beta_2 = 1.0 - (step ** self.decay_rate).astype(parameter_rms.dtype)
        update = ops.square(gradient) + self.eps[0]
        if factored:
            row = beta_2 * state["exp_avg_sq_row"] + (1 - beta_2) * ops.mean(update, axis=-1)
            col = beta_2 * state["exp_avg_sq_col"] + (1 - beta_2) * ops.mean(update, axis=-2)
            state["exp_avg_sq_row"] = row
            state["exp_avg_sq_col"] = col
            update = self._approximate_exp_moving_avg(row, col) * gradient
        else:
            exp_avg_sq = beta_2 * state["exp_avg_sq"] + (1 - beta_2) * update
            state["exp_avg_sq"] = exp_avg_sq
            update = ops.rsqrt(exp_avg_sq) * gradient
        update = update / ops.maximum(1.0, self._compute_rms(update) / self.clip_threshold)
        update = learning_rate * update
        if self.beta_1 is not None:
            exp_avg = self.beta_1 * state["exp_avg"] + (1 - self.beta_1) * update
            state["exp_avg"] = exp_avg
            update = exp_avg
        if self.weight_decay != 0:
            parameter = parameter + parameter * (-self.weight_decay * learning_rate)
        return parameter - update


class Muon(Optimizer):
    r"""Muon: momentum orthogonalized by Newton-Schulz (Keller Jordan, 2024).

        g_t = g_t + weight_decay w_t
        v_{t+1} = mu v_t + (1 - mu) g_t
        u = (1 - mu) g_t + mu v_{t+1}   (nesterov; else u = v_{t+1})
        w_{t+1} = w_t - lr sqrt(max(1, rows / cols)) NS5(u)

    NS5 runs `ns_steps` quintic Newton-Schulz iterations (coefficients 3.4445,
    -4.7750, 2.0315) that drive the singular values of u, scaled to Frobenius norm 1,
    towards 1; arrays of more than 2 dimensions are flattened to (shape[0], -1) for
    it; 0-d and 1-d parameters take the plain momentum step `w - lr u`. Meant for the
    hidden layers' matrices (use e.g. AdamW for embeddings, the output layer, biases).

        opt = optim.Muon(learning_rate=0.02)

    Args:
        learning_rate (float or callable): the learning rate `lr`.
        momentum (float): the momentum strength `mu`. Default 0.95.
        weight_decay (float): the L2 penalty. Default 0.01.
        nesterov (bool): Nesterov momentum. Default True.
        ns_steps (int): Newton-Schulz iterations. Default 5.
    """

    def __init__(self, learning_rate: _Scalar, momentum: float = 0.95, weight_decay: float = 0.01,
                 nesterov: bool = True, ns_steps: int = 5):
        super().__init__()
        self._maybe_schedule("learning_rate", learning_rate)
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self.ns_steps = ns_steps

    def init_single(self, parameter, state):
        state["v"] = ops.zeros_like(parameter)

    @staticmethod
    def _zeropower_via_newtonschulz5(X, steps: int):
        if X.ndim != 2:
            raise ValueError(f"[Muon] Newton-Schulz needs a 2-D array, got shape {X.shape}")
        a, b, c = 3.4445, -4.7750, 2.0315
        # iterate on the wide orientation: X X^T is then the smaller Gram matrix
        transpose = X.shape[-2] > X.shape[-1]
        if transpose:
            X = X.T
        X = X / (ops.sqrt(ops.sum(ops.square(X), keepdims=True)) + 1e-7)
        for _ in range(steps):
            A = X @ X.T
            B = ops.addmm(b * A, A, A, beta=1.0, alpha=c)
            X = ops.addmm(a * X, B, X, beta=1.0, alpha=1.0)
        return X.T if transpose else X

    def apply_single(self, gradient, parameter, state):
        if self.weight_decay != 0:
            gradient = gradient + self.weight_decay * parameter
        v = self.momentum * state["v"] + (1 - self.momentum) * gradient
        state["v"] = v
        update = gradient * (1 - self.momentum) + v * self.momentum if self.nesterov else v
        lr = self.learning_rate.astype(gradient.dtype)
        if update.ndim >= 2:
            shape = update.shape
            update = self._zeropower_via_newtonschulz5(update.reshape(shape[0], -1), steps=self.ns_steps)
            update = update.reshape(shape)
            lr = lr * max(1, update.shape[-2] / update.shape[-1]) ** 0.5
        return parameter - lr * update


def clip_grad_norm(grads, max_norm: float):
    """Scale `grads` so that their global L2 norm is at most `max_norm`.

        >>> clipped, total_norm = clip_grad_norm({"w1": w1, "w2": w2}, max_norm=2.0)

    Returns (the possibly rescaled gradients, the original global norm as a 0-d array).
    The gradients are multiplied by a float32 factor (as MLX), which promotes integer
    and lower-precision gradients to float32.
    """
    if max_norm < 0:
        raise ValueError(f"[clip_grad_norm] max_norm must be non-negative, got {max_norm}")
    leaves = [g for _, g in tree_flatten(grads) if g is not None]
    norm_squared = array(0.0)
    for g in leaves:
        norm_squared = norm_squared + ops.sum(ops.square(g.astype(dt.float32)))
    total_norm = ops.sqrt(norm_squared)
    # as MLX: multiply by a float32 factor (<= 1), so integer gradients become float32
    normalizer = ops.minimum(max_norm / (total_norm + 1e-6), 1.0)

    def clipper(g):
        return None if g is None else g * normalizer

    return _map_leaves(clipper, grads), total_norm


def _map_leaves(fn, tree):
    if tree is None:
        return None
    if isinstance(tree, dict):
        return {k: _map_leaves(fn, v) for k, v in tree.items()}
    if _is_seq(tree):
        out = [_map_leaves(fn, v) for v in tree]
        return tuple(out) if isinstance(tree, tuple) else out
    return fn(tree)
