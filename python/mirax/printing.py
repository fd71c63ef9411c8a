"""MLX's print options: the number of decimals arrays print with.

    mr.set_printoptions(precision=3)        # every float prints with 3 decimals
    with mr.printoptions(precision=2):      # ...or only inside the block
        print(x)
    mr.get_printoptions().precision         # -1: the default formatting

As in MLX the setting is global to the process (not per thread).
"""
from __future__ import annotations


class PrintOptions:
    """The options `repr(array)` follows; `precision` -1 means the default format."""

    __slots__ = ("precision",)

    def __init__(self, precision: int = -1):
        self.precision = _check(precision)

    def __repr__(self):
        return f"PrintOptions(precision={self.precision})"


def _check(precision):
    if isinstance(precision, bool) or not isinstance(precision, int):
        raise TypeError(f"printoptions: precision must be an int, got {type(precision).__name__}")
    if precision < -1:
        raise ValueError(f"printoptions: precision must be -1 (default) or >= 0, got {precision}")
    return precision


_OPTIONS = PrintOptions()


def set_printoptions(precision: int = -1) -> None:
    """Print floats with `precision` decimals from now on (-1: the default format):

        mr.set_printoptions(precision=3); print(mr.array([1.23456]))   # array([1.235], ...)
    """
    global _OPTIONS
    _OPTIONS = PrintOptions(precision)


def get_printoptions() -> PrintOptions:
    """The current options (a copy: changing it changes nothing)."""
    return PrintOptions(_OPTIONS.precision)


class printoptions:
    """`with mr.printoptions(precision=2): print(x)` sets the options inside the block only."""

    def __init__(self, precision: int = -1):
        self._new = PrintOptions(precision)
        self._old = None

    def __enter__(self):
        global _OPTIONS
        self._old, _OPTIONS = _OPTIONS, self._new
        return self

    def __exit__(self, *exc):
        global _OPTIONS
        _OPTIONS = self._old
        return False


def _general(v) -> str:
    """C++'s default float format, as MLX prints: 6 significant digits, no trailing zeros
    (1.0 -> '1', 1.123456789 -> '1.12346')."""
    return f"{float(v):g}"


def _general_complex(v) -> str:
    """1+1j, 1-1j: MLX's complex format."""
    return f"{v.real:g}{v.imag:+g}j"


def array2string_kwargs() -> dict:
    """numpy `array2string` arguments for the current options: C++'s default format (as
    MLX) or, with a precision set, fixed notation; rows longer than 6 are summarised with
    3 items at each end, as MLX does."""
    p = _OPTIONS.precision
    common = {"threshold": 6, "edgeitems": 3}
    if p < 0:
        return {**common, "formatter": {"float_kind": _general, "complex_kind": _general_complex, "int": str,
                                        "bool": str}}
    return {**common, "precision": p, "floatmode": "fixed", "suppress_small": True}
