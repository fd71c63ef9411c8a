"""`mirax.distributed`: MLX's `mx.distributed` on MPI (mpi4py).

    import mirax as mr
    world = mr.distributed.init()           # every process of `mirax.launch -n 4 ...`
    x = mr.distributed.all_sum(mr.ones(3))  # [4, 4, 4] on each of the 4 processes

A process not started by an MPI launcher is a group of size 1 in which the collectives
are the identity (send/recv raise), as in MLX. The collectives are primitives
(dialect/distributed.py): lazy, differentiable, batchable and part of `mr.compile`d
functions; they run on the CPU through MPI, and arrays on the GPU go through host
memory. Install the MPI runtime with `pip install 'mirax[distributed]'`.
"""
from __future__ import annotations

from .array import Array, apply, asarray
from .dialect import dtypes as dt
from .dialect.core import MiraxError
from .runtime import mpi

__all__ = ["Group", "init", "is_available", "all_sum", "all_max", "all_min", "all_gather", "sum_scatter",
           "send", "recv", "recv_like", "DistributedError"]

DistributedError = mpi.DistributedError
_BACKENDS = ("any", "mpi", "ring", "nccl", "jaccl")


class Group:
    """A group of processes that communicate (MLX's `mx.distributed.Group`).

    >>> g = mr.distributed.init()
    >>> g.rank(), g.size()
    (0, 1)
    """

    def __init__(self, gid):
        self._id = gid

    def rank(self) -> int:
        """The rank of this process in the group."""
        return mpi.group(self._id).rank

    def size(self) -> int:
        """The number of processes in the group."""
        return mpi.group(self._id).size

    def split(self, color: int, key: int = -1) -> "Group":
        """The processes that pass the same `color` form a new group, ranked by `key`
        (default: their rank in this group)."""
        return Group(mpi.split(self._id, color, key))

    def __repr__(self):
        return f"Group(rank={self.rank()}, size={self.size()})"


def is_available(backend: str = "any") -> bool:
    """Whether a communication backend can be used (mirax has MPI: mpi4py importable)."""
    _check_backend(backend)
    return backend in ("any", "mpi") and mpi.available()


def init(strict: bool = False, backend: str = "any") -> Group:
    """The group of every process of the job. Without an MPI launcher this is a group
    of size 1, or with `strict=True` a RuntimeError.

    >>> world = mr.distributed.init()
    """
    _check_backend(backend)
    if backend not in ("any", "mpi"):
        if strict:
            raise RuntimeError(f"[distributed] mirax has no '{backend}' backend; use 'mpi' (or 'any')")
        return Group(mpi.world())
    return Group(mpi.world(strict=strict))


def _check_backend(backend):
    if backend not in _BACKENDS:
        raise ValueError("[distributed] The only valid values for backend are 'any', 'mpi', 'nccl', 'jaccl' "
                         f"and 'ring' but '{backend}' was provided.")


def _group(group, op) -> int:
    if group is None:
        return mpi.world()
    if not isinstance(group, Group):
        raise TypeError(f"mirax.distributed.{op}: group must be a mirax.distributed.Group, got {type(group).__name__}")
    return group._id


def _arr(x, op):
    try:
        return x if isinstance(x, Array) else asarray(x)
    except (TypeError, ValueError) as err:
        raise TypeError(f"mirax.distributed.{op}: x must be an array, got {type(x).__name__} ({err})") from None


def _reduce(name, x, group):
    x = _arr(x, name)
    gid = _group(group, name)
    if mpi.group(gid).size == 1:
        return x
    if x.dtype is dt.bfloat16:  # MPI has no bfloat16: reduce the exact float32 values
        return _reduce(name, x.astype(dt.float32), group).astype(dt.bfloat16)
    return apply(name, [x], group=gid)


def all_sum(x, *, group: Group | None = None, stream=None) -> Array:
    """The elementwise sum of `x` over the processes of `group` (default: the world).

    >>> mr.distributed.all_sum(mr.ones(2))   # [n, n] with n processes
    """
    return _reduce("all_sum", x, group)


def all_max(x, *, group: Group | None = None, stream=None) -> Array:
    """The elementwise maximum of `x` over the processes of `group`."""
    return _reduce("all_max", x, group)


def all_min(x, *, group: Group | None = None, stream=None) -> Array:
    """The elementwise minimum of `x` over the processes of `group`."""
    return _reduce("all_min", x, group)


def all_gather(x, *, group: Group | None = None, stream=None) -> Array:
    """`x` of every process concatenated along axis 0, in rank order (0-d: stacked).

    >>> mr.distributed.all_gather(mr.array([rank]))   # [0, 1, ..., n-1]
    """
    x = _arr(x, "all_gather")
    gid = _group(group, "all_gather")
    if mpi.group(gid).size == 1:
        return x
    return apply("all_gather", [x], group=gid)


def sum_scatter(x, *, group: Group | None = None, stream=None) -> Array:
    """The sum of `x` over the processes, of which process r keeps block r of axis 0
    (axis 0 must be divisible by the group size).

    >>> mr.distributed.sum_scatter(mr.ones((4, 2)))   # (2, 2) of 2s on each of 2 processes
    """
    x = _arr(x, "sum_scatter")
    gid = _group(group, "sum_scatter")
    n = mpi.group(gid).size
    if n == 1:
        return x
    if x.ndim == 0 or x.shape[0] % n:
        raise ValueError(f"[sum_scatter] Invalid shape={list(x.shape)} for a group of size {n}. The first "
                         "dimension (axis 0) must be divisible by the group size.")
    if x.dtype is dt.bfloat16:
        return sum_scatter(x.astype(dt.float32), group=group).astype(dt.bfloat16)
    return apply("sum_scatter", [x], group=gid)


def _peer(op, peer, name, gid):
    n = mpi.group(gid).size
    if n == 1:
        raise ValueError(f"Cannot {op} {'to' if op == 'send' else 'from'} a singleton group")
    if not isinstance(peer, int) or not 0 <= peer < n:
        raise ValueError(f"Invalid {name}={peer} for a group of size {n}")


def send(x, dst: int, *, group: Group | None = None, stream=None) -> Array:
    """Send `x` to process `dst`; the result is `x` and evaluating it sends.

    >>> mr.eval(mr.distributed.send(x, 1))   # on rank 0; rank 1 calls recv_like(x, 0)
    """
    x = _arr(x, "send")
    gid = _group(group, "send")
    _peer("send", dst, "destination", gid)
    return apply("send", [x], dst=dst, group=gid)


def recv(shape, dtype, src: int, *, group: Group | None = None, stream=None) -> Array:
    """An array of `shape` and `dtype` received from process `src`.

    >>> y = mr.distributed.recv((3,), mr.float32, 0)
    """
    from .ops import zeros
    gid = _group(group, "recv")
    _peer("recv", src, "source", gid)
    try:
        like = zeros(tuple(shape), dtype)
    except (TypeError, ValueError, MiraxError) as err:
        raise ValueError(f"mirax.distributed.recv: invalid shape {shape!r} or dtype {dtype!r}: {err}") from None
    return apply("recv", [like], src=src, group=gid)


def recv_like(x, src: int, *, group: Group | None = None, stream=None) -> Array:
    """An array shaped like `x` (shape and dtype) received from process `src`."""
    x = _arr(x, "recv_like")
    return recv(x.shape, x.dtype, src, group=group)
