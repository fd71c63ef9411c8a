"""Parsing the options of the transform passes (`argnums=0,1`, `in-axes=0,none`)."""
from __future__ import annotations

from ..lowering.pass_base import MiraxPass


def int_list(v, allow_none=False):
    """0 -> [0]; "0,1" -> [0, 1]; "0,none" -> [0, None] (when allowed)."""
    if v is None or v == "":
        return []
    if isinstance(v, (list, tuple)):
        items = list(v)
    elif isinstance(v, int):
        items = [v]
    else:
        items = [x.strip() for x in str(v).split(",")]
    out = []
    for x in items:
        if allow_none and (x is None or str(x).lower() == "none"):
            out.append(None)
        else:
            out.append(int(x))
    return out


class TransformPass(MiraxPass):
    """A pass that adds a transformed copy of `@function` to the module."""

    def run(self, module):
        from .interpret import unique_name
        fn = self.opts["function"]
        if not fn:
            raise ValueError(f"pass '{self.name}' needs the option function=<name>")
        new = self.opts.get("result") or unique_name(module, f"{fn}_{self.suffix}")
        self.transform(module, fn, new)

    suffix = ""

    def transform(self, module, fn, new):
        raise NotImplementedError
