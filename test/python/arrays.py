"""Test inputs that keep numpy's dtype: `mr.array` turns float64 numpy arrays into
float32 (as MLX does), while tests that compare against numpy in float64 want float64.

    from arrays import A
    A(np.ones(3))           # float64, where mr.array(np.ones(3)) is float32
"""
import numpy as np

import mirax as mr


def A(x, dtype=None):
    """`mr.array(x, dtype)`, keeping a float64 (or float64 scalar) numpy input float64."""
    if dtype is None and isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype == np.float64:
        dtype = mr.float64
    return mr.array(x, dtype) if dtype is not None else mr.array(x)
