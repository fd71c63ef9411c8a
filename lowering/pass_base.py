"""What a mirax pass is: a name, a summary, options, and a `run` over the module.

Passes run inside upstream `PassManager`s as Python passes, so a pipeline mixes them
freely with upstream passes: `add_to(pm)` appends the pass and any upstream passes that
complete it (`after`).
"""
from __future__ import annotations

from mlir import ir

from ..dialect.core import MiraxError


class PassError(MiraxError):
    """A pass failed on an op; carries the op's location for MLIR-style diagnostics."""

    def __init__(self, op, message):
        self.location = str(op.location) if op is not None else "loc(unknown)"
        self.message = message
        super().__init__(f"{self.location}: error: {message}")


class MiraxPass:
    name = ""
    summary = ""
    after: list = []  # upstream pipeline elements appended after run()
    options: dict = {}  # option name -> (default, help)

    def __init__(self, **options):
        unknown = set(options) - set(self.options)
        if unknown:
            raise ValueError(f"pass '{self.name}' has no option {', '.join(sorted(unknown))}")
        self.opts = {k: v[0] for k, v in self.options.items()}
        self.opts.update(options)

    def run(self, module: ir.Operation):
        raise NotImplementedError

    def add_to(self, pm):
        def callback(op, *_):
            self.run(op)
        pm.add(callback, name=self.name) if _add_takes_name(pm) else pm.add(callback)
        for p in self.after:
            pm.add(p)


def isa(cls, value) -> bool:
    """Whether an ir.Type / ir.Attribute / affine expr casts to `cls` (the bindings raise
    ValueError when it does not): `isa(ir.MemRefType, v.type)`."""
    try:
        cls(value)
        return True
    except (ValueError, TypeError):
        return False


def _add_takes_name(pm):
    return True


def walk_ops(root, keep):
    """The ops nested in `root` (not `root` itself), in program order, whose name
    satisfies `keep(name)`."""
    out = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    if keep(child.name):
                        out.append(child)
                    visit(child)
    visit(root)
    return out
