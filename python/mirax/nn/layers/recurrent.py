"""Recurrent layers, as `mlx.nn`: RNN (Elman), GRU and LSTM over (N, L, D) or (L, D)
inputs, unrolled in Python over the sequence axis (one step's ops per time step, so a
compiled call fuses the whole unrolled sequence).

    lstm = nn.LSTM(input_size=8, hidden_size=16)
    hidden, cell = lstm(x)                # each (N, L, 16)
    hidden, cell = lstm(x2, hidden=hidden[:, -1], cell=cell[:, -1])   # continue a sequence
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from ... import ops as mr
from ... import random as mrandom
from .activations import tanh
from .base import Module

__all__ = ["RNN", "GRU", "LSTM"]


def _uniform(scale, shape):
    return mrandom.uniform(low=-scale, high=scale, shape=shape)


def _check_input(name, x, input_size):
    if x.ndim < 2:
        raise ValueError(f"[{name}] expects an input of shape (N, L, D) or (L, D) but got shape {x.shape}")
    if x.shape[-1] != input_size:
        raise ValueError(f"[{name}] expects {input_size} input features but got shape {x.shape}")


class RNN(Module):
    r"""An Elman recurrent layer: h_{t+1} = nonlinearity(W_xh x_t + W_hh h_t + b).

    Parameters `Wxh` (H, D), `Whh` (H, H) and `bias` (H,), all drawn from
    U(-1/sqrt(H), 1/sqrt(H)). `__call__(x, hidden=None)` returns the hidden state at
    every step, (N, L, H) or (L, H); `hidden` is the initial state, (N, H) or (H,).

        rnn = nn.RNN(4, 8, nonlinearity=nn.relu)
        h = rnn(mr.zeros((2, 5, 4)))          # (2, 5, 8)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: Optional[Callable] = None):
        super().__init__()
        self.nonlinearity = nonlinearity or tanh
        if not callable(self.nonlinearity):
            raise ValueError(f"[RNN] Nonlinearity must be callable. Current value: {nonlinearity}.")
        scale = 1.0 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.Wxh = _uniform(scale, (hidden_size, input_size))
        self.Whh = _uniform(scale, (hidden_size, hidden_size))
        self.bias = _uniform(scale, (hidden_size,)) if bias else None

    def _extra_repr(self):
        return (f"input_dims={self.Wxh.shape[1]}, hidden_size={self.hidden_size}, "
                f"nonlinearity={self.nonlinearity}, bias={self.bias is not None}")

    def __call__(self, x, hidden=None):
        _check_input("RNN", x, self.Wxh.shape[1])
        # the input projection of all steps at once; only W_hh h_t is sequential
        x = mr.addmm(self.bias, x, self.Wxh.T) if self.bias is not None else x @ self.Wxh.T
        all_hidden = []
        for t in range(x.shape[-2]):
            pre = x[..., t, :]
            if hidden is not None:
                pre = mr.addmm(pre, hidden, self.Whh.T)
            hidden = self.nonlinearity(pre)
            all_hidden.append(hidden)
        return mr.stack(all_hidden, axis=-2)


class GRU(Module):
    r"""A gated recurrent unit layer:

        r = sigmoid(W_xr x + W_hr h + b_r),  z = sigmoid(W_xz x + W_hz h + b_z)
        n = tanh(W_xn x + b_n + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h

    Parameters `Wx` (3H, D) and `Wh` (3H, H) stacked in the order r, z, n; `b` (3H,)
    and `bhn` (H,); all drawn from U(-1/sqrt(H), 1/sqrt(H)). `__call__(x, hidden=None)`
    returns the hidden state at every step, (N, L, H) or (L, H).

        gru = nn.GRU(4, 8)
        h = gru(mr.zeros((5, 4)))             # (5, 8)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.hidden_size = hidden_size
        scale = 1.0 / math.sqrt(hidden_size)
        self.Wx = _uniform(scale, (3 * hidden_size, input_size))
        self.Wh = _uniform(scale, (3 * hidden_size, hidden_size))
        self.b = _uniform(scale, (3 * hidden_size,)) if bias else None
        self.bhn = _uniform(scale, (hidden_size,)) if bias else None

    def _extra_repr(self):
        return f"input_dims={self.Wx.shape[1]}, hidden_size={self.hidden_size}, bias={self.b is not None}"

    def __call__(self, x, hidden=None):
        _check_input("GRU", x, self.Wx.shape[1])
        H = self.hidden_size
        x = mr.addmm(self.b, x, self.Wx.T) if self.b is not None else x @ self.Wx.T
        x_rz, x_n = x[..., :-H], x[..., -H:]
        all_hidden = []
        for t in range(x.shape[-2]):
            rz = x_rz[..., t, :]
            if hidden is not None:
                h_proj = hidden @ self.Wh.T
                h_proj_rz, h_proj_n = h_proj[..., :-H], h_proj[..., -H:]
                if self.bhn is not None:
                    h_proj_n = h_proj_n + self.bhn
                rz = rz + h_proj_rz
            r, z = mr.split(mr.sigmoid(rz), 2, axis=-1)
            n = x_n[..., t, :]
            if hidden is not None:
                n = n + r * h_proj_n
            elif self.bhn is not None:  # h = 0: W_hn h vanishes, b_hn stays
                n = n + r * self.bhn
            n = mr.tanh(n)
            hidden = (1 - z) * n + z * hidden if hidden is not None else (1 - z) * n
            all_hidden.append(hidden)
        return mr.stack(all_hidden, axis=-2)


class LSTM(Module):
    r"""A long short-term memory layer:

        i, f, g, o = sigmoid(.), sigmoid(.), tanh(.), sigmoid(.) of W_x x + W_h h + b
        c' = f * c + i * g,  h' = o * tanh(c')

    Parameters `Wx` (4H, D) and `Wh` (4H, H) stacked in the order i, f, g, o and `bias`
    (4H,), all drawn from U(-1/sqrt(H), 1/sqrt(H)). `__call__(x, hidden=None, cell=None)`
    returns (hidden states, cell states), each (N, L, H) or (L, H).

        lstm = nn.LSTM(4, 8)
        h, c = lstm(mr.zeros((2, 5, 4)))      # (2, 5, 8) each
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.hidden_size = hidden_size
        scale = 1.0 / math.sqrt(hidden_size)
        self.Wx = _uniform(scale, (4 * hidden_size, input_size))
        self.Wh = _uniform(scale, (4 * hidden_size, hidden_size))
        self.bias = _uniform(scale, (4 * hidden_size,)) if bias else None

    def _extra_repr(self):
        return f"input_dims={self.Wx.shape[1]}, hidden_size={self.hidden_size}, bias={self.bias is not None}"

    def __call__(self, x, hidden=None, cell=None):
        _check_input("LSTM", x, self.Wx.shape[1])
        x = mr.addmm(self.bias, x, self.Wx.T) if self.bias is not None else x @ self.Wx.T
        all_hidden, all_cell = [], []
        for t in range(x.shape[-2]):
            ifgo = x[..., t, :]
            if hidden is not None:
                ifgo = mr.addmm(ifgo, hidden, self.Wh.T)
            i, f, g, o = mr.split(ifgo, 4, axis=-1)
            i, f, g, o = mr.sigmoid(i), mr.sigmoid(f), mr.tanh(g), mr.sigmoid(o)
            cell = f * cell + i * g if cell is not None else i * g
            hidden = o * mr.tanh(cell)
            all_cell.append(cell)
            all_hidden.append(hidden)
        return mr.stack(all_hidden, axis=-2), mr.stack(all_cell, axis=-2)
