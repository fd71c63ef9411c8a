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

    suffix = ""
    int_options = {"argnums": False, "in-axes": True, "out-axes": True}  # option -> allows `none`

    def __init__(self, **options):
        from ..dialect.core import MiraxError
        super().__init__(**options)
        if not self.opts.get("function"):
            raise MiraxError(f"pass '{self.name}' needs the option function=<name>")
        for k, allow_none in self.int_options.items():
            if k not in self.opts:
                continue
            try:
                vals = int_list(self.opts[k], allow_none)
            except ValueError:
                raise MiraxError(f"pass '{self.name}': option {k}={self.opts[k]!r} is not a comma separated "
                                 f"list of integers{' or none' if allow_none else ''}") from None
            if k == "argnums" and len(set(vals)) != len(vals):  # one tangent per argument
                raise MiraxError(f"pass '{self.name}': option argnums={self.opts[k]!r} repeats an argument")
        if "batch-size" in self.opts:
            try:
                int(self.opts["batch-size"])
            except ValueError:
                raise MiraxError(f"pass '{self.name}': option batch-size={self.opts['batch-size']!r} is not an "
                                 "integer") from None

    def run(self, module):
        from ..dialect.core import MiraxError
        from ..lowering.pass_base import PassError
        from .interpret import find_function, unique_name
        fn = self.opts["function"]
        new = self.opts.get("result") or unique_name(module, f"{fn}_{self.suffix}")
        try:
            func_op = find_function(module, fn)
        except MiraxError as err:
            raise PassError(module, f"{self.name}: {err}") from None
        from ..array import at_loc, loc_of
        try:
            with at_loc(loc_of(func_op.location)):  # what the pass adds is located in the function
                self.transform(module, fn, new)
        except MiraxError as err:  # a user error: report it at the function
            raise PassError(func_op, str(err)) from None

    def transform(self, module, fn, new):
        raise NotImplementedError
