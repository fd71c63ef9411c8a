"""Numbers read from `MIRAX_*` environment variables, with errors that name the variable.

    from .environment import number
    _LIMIT = number("MIRAX_BUFFER_CACHE_MB", 2048, int) << 20

`int("abc")` alone raised "invalid literal for int() with base 10: 'abc'" from deep in
an import, with nothing to say which setting was wrong.
"""
from __future__ import annotations

import os


def number(name: str, default, kind=float, minimum=None):
    """`kind(os.environ[name])` (`default` when unset or empty); a ValueError naming the
    variable and its value when it is not a number of that kind or below `minimum`."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        # (an int written as 1e3 or 2.0 is taken as a float first, then cut to int)
        value = kind(float(text)) if kind is int and ("." in text or "e" in text.lower()) else kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"mirax: {name}={text!r}: expected {what}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"mirax: {name}={text!r}: expected at least {minimum}")
    return value
