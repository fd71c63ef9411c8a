"""The mirax dialect: every primitive declared once, in one module per family.

`PRIMITIVES` maps an op name (without the `mirax.` prefix) to its `Primitive`.
`irdl_text()` derives the IRDL definition checked in as `dialect/mirax.irdl.mlir`.
"""
from pathlib import Path

from . import dtypes
from .core import PRIMITIVES, Aval, MiraxError, Primitive
from . import creation, elementwise, reduction, shape, indexing, linalg, random, conv  # noqa: F401  (declare ops)
from . import decomp  # noqa: F401  (host primitives: the matrix decompositions)
from . import distributed  # noqa: F401  (host primitives: MPI collectives)
from . import bitcast, depends  # noqa: F401  (MLX's view and depends)
from . import barrier  # noqa: F401  (optimization_barrier: keeps checkpoint's recomputation)
from . import sort  # noqa: F401  (argsort: a merge sort of each row)
from .irdl import irdl_text

IRDL_PATH = Path(__file__).with_name("mirax.irdl.mlir")

__all__ = ["PRIMITIVES", "Aval", "MiraxError", "Primitive", "dtypes", "irdl_text", "IRDL_PATH"]
