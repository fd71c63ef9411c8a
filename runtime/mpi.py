"""MPI through mpi4py: the process groups of `mirax.distributed` and the collectives
on numpy buffers that its host primitives (dialect/distributed.py) run.

    gid = world()                       # 0: every process of the job (size 1 without mpirun)
    y = all_reduce(x, gid, "sum")       # numpy in, numpy out

A group is an integer id (the `group` attribute of the ops) into `_GROUPS`; id 0 is the
world. Every collective waits at most `MIRAX_DISTRIBUTED_TIMEOUT` seconds (default
600): a rank that died, raised or called another collective makes the others raise
`DistributedError` instead of hanging. Before a collective the ranks exchange what they
are about to do (op, dtype, shape), so a mismatch is an error naming the collective and
every rank's operand rather than MPI's undefined behaviour.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from .environment import number

# variables the MPI launchers (Open MPI's mpirun, MPICH's hydra, PMIx) set in each rank
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")
_DESC_BYTES = 96  # what each rank tells the others before a collective


class DistributedError(RuntimeError):
    """A collective that could not complete: a peer died or hangs, or the ranks disagree."""


class _Single:
    """The group of one process, without MPI (MLX's EmptyGroup)."""
    rank, size = 0, 1


class _Group:
    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()


_GROUPS: list = []
_lock = threading.Lock()


def launched() -> bool:
    """Whether this process was started by an MPI launcher (mpirun, mirax.launch)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


def available() -> bool:
    """Whether mpi4py (and an MPI library under it) can be imported."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def world(strict=False):
    """The id of the world group (0), initializing MPI on first use when this process was
    launched by mpirun; otherwise the group of this process alone (strict: an error)."""
    with _lock:
        if _GROUPS and not (strict and isinstance(_GROUPS[0], _Single)):
            return 0
        if not launched():
            if strict:
                raise RuntimeError("[mpi] The world has a single process. Launch with mpirun "
                                   "(or mirax.launch) to initialize the mpi backend.")
            _GROUPS[:] = _GROUPS or [_Single()]
            return 0
        try:
            from mpi4py import MPI
        except ImportError as err:
            if strict:
                raise RuntimeError(f"Cannot initialize MPI: {err} (pip install 'mirax[distributed]')") from None
            _GROUPS[:] = _GROUPS or [_Single()]
            return 0
        _GROUPS[:1] = [_Group(MPI.COMM_WORLD)]
        if MPI.COMM_WORLD.Get_size() > 1:
            _abort_on_uncaught_exception()
        return 0


def library() -> str:
    """The path of the MPI library mpi4py loaded (what compiled MPI calls link against)."""
    from mpi4py import MPI  # noqa: F401 - loads the library
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(("libmpi.so", "libmpich.so")):
                return path
    raise RuntimeError("[mpi] mpi4py is loaded but no libmpi/libmpich is mapped in this process")


def group(gid):
    if not _GROUPS:
        world()
    try:
        return _GROUPS[gid]
    except IndexError:
        raise ValueError(f"mirax.distributed: no group {gid} in this process") from None


def split(gid, color, key=-1):
    """A new group of the ranks of `gid` that passed the same `color`, ordered by `key`
    (default: their rank in `gid`)."""
    g = group(gid)
    if isinstance(g, _Single):
        raise RuntimeError("Cannot split the distributed group further.")
    comm = g.comm.Split(int(color), int(key) if key >= 0 else g.rank)
    with _lock:
        _GROUPS.append(_Group(comm))
        return len(_GROUPS) - 1


def timeout() -> float:
    return number("MIRAX_DISTRIBUTED_TIMEOUT", 600.0, minimum=0)


def _abort_on_uncaught_exception():
    """A rank that dies of an exception takes the job down (MPI_Abort) instead of
    leaving the others waiting in a collective (what `python -m mpi4py` does)."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        _report(_GROUPS[0].rank, kind, value)
        sys.stderr.write(f"mirax.distributed: rank {_GROUPS[0].rank} raised {kind.__name__}; aborting the job\n")
        sys.stderr.flush()
        _GROUPS[0].comm.Abort(1)
    sys.excepthook = hook


REPORTS = "MIRAX_LAUNCH_REPORTS"  # a folder mirax.launch reads after the job


def _report(rank, kind, value):
    """Tell mirax.launch why this rank fails, in a file: mpirun forwards a rank's output
    asynchronously, and the abort can stop the job before the last lines (the traceback,
    the message) are forwarded, more often the busier the machine."""
    folder = os.environ.get(REPORTS)
    if not folder:
        return
    first = str(value).strip().splitlines()[0] if str(value).strip() else ""
    try:
        with open(os.path.join(folder, f"rank{rank}"), "w") as f:
            f.write(f"raised {kind.__name__}" + (f": {first}" if first else ""))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        pass


def _wait(req, what, g, status=None):
    """Wait for a nonblocking MPI request, at most `timeout()` seconds."""
    limit = timeout()
    deadline = time.monotonic() + limit
    from mpi4py import MPI
    spins = 0
    while True:
        try:
            if req.Test(status) if status is not None else req.Test():
                return
        except MPI.Exception as err:
            raise DistributedError(f"{what}: rank {g.rank} of {g.size}: {err.Get_error_string()}") from None
        spins += 1
        if spins > 2000:  # long waits yield the core to the other ranks (oversubscribed hosts)
            time.sleep(0 if spins < 20000 else 0.0002)
            if time.monotonic() > deadline:
                raise DistributedError(
                    f"{what}: rank {g.rank} of {g.size} waited {limit:g} s for the others "
                    "(MIRAX_DISTRIBUTED_TIMEOUT): a rank died, raised, or did not reach this collective")


def _describe(x):
    return f"{x.dtype.name}{list(x.shape)}"


def _agree(what, g, x, extra=""):
    """Check that every rank of `g` calls `what` on an operand of the same dtype and shape."""
    text = (what + extra + "|" + _describe(x)).encode()[:_DESC_BYTES]
    mine = np.zeros(_DESC_BYTES, np.uint8)
    mine[:len(text)] = np.frombuffer(text, np.uint8)
    alls = np.empty((g.size, _DESC_BYTES), np.uint8)
    _wait(g.comm.Iallgather(mine, alls), what, g)
    descs = [bytes(r).rstrip(b"\0").decode(errors="replace") for r in alls]
    if len(set(descs)) > 1:
        detail = ", ".join(f"rank {i}: {d.split('|', 1)[-1] if d.startswith(what) else d}"
                           for i, d in enumerate(descs))
        raise DistributedError(f"{what}: the ranks' operands differ ({detail}); "
                               "every rank must pass the same shape and dtype")


def _wide(x):
    """A dtype MPI can reduce: half floats and bools are reduced wider."""
    if x.dtype == np.float16:
        return x.astype(np.float32)
    if x.dtype == np.bool_:
        return x.astype(np.int32)
    return np.require(x, requirements="C")  # ascontiguousarray would make a 0-d array 1-d


def _narrow(y, like):
    if like.dtype == np.bool_:
        return y != 0
    return y.astype(like.dtype, copy=False)


def all_reduce(x, gid, op):
    """The elementwise sum, max or min of `x` over the ranks of group `gid`."""
    from mpi4py import MPI
    what = f"mirax.distributed.all_{op}"
    g = group(gid)
    if isinstance(g, _Single):
        return np.array(x)
    _agree(what, g, x)
    src = _wide(x)
    out = np.empty_like(src)
    _wait(g.comm.Iallreduce(src, out, {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]), what, g)
    return _narrow(out, x)


def all_gather(x, gid):
    """The operands of every rank concatenated along axis 0 (0-d ones stacked)."""
    what = "mirax.distributed.all_gather"
    g = group(gid)
    shape = (g.size * x.shape[0],) + x.shape[1:] if x.ndim else (g.size,)
    if isinstance(g, _Single):
        return np.array(x).reshape(shape)
    _agree(what, g, x)
    out = np.empty(shape, x.dtype)
    _wait(g.comm.Iallgather(_bytes(x), _bytes(out)), what, g)
    return out


def sum_scatter(x, gid):
    """The sum over the ranks of `x`, of which rank r keeps block r of axis 0."""
    what = "mirax.distributed.sum_scatter"
    g = group(gid)
    if isinstance(g, _Single):
        return np.array(x)
    _agree(what, g, x)
    src = _wide(x)
    out = np.empty((x.shape[0] // g.size,) + x.shape[1:], src.dtype)
    from mpi4py import MPI
    _wait(g.comm.Ireduce_scatter_block(src, out, MPI.SUM), what, g)
    return _narrow(out, x)


_TAG = 7


def send(x, dst, gid):
    """Send `x` to rank `dst` of group `gid`; returns `x` (as MLX's send)."""
    what = "mirax.distributed.send"
    g = group(gid)
    _wait(g.comm.Isend(_bytes(x), dest=dst, tag=_TAG), what, g)
    return np.array(x)


def recv(like, src, gid):
    """An array shaped like `like` received from rank `src` of group `gid`."""
    from mpi4py import MPI
    what = "mirax.distributed.recv"
    g = group(gid)
    out = np.empty(like.shape, like.dtype)
    buf = _bytes(out)
    status = MPI.Status()
    # one byte more than expected: a longer message shows as a count, not MPI_ERR_TRUNCATE
    spare = np.empty(buf.size + 1, np.uint8)
    _wait(g.comm.Irecv(spare, source=src, tag=_TAG), what, g, status)
    n = status.Get_count(MPI.BYTE)
    if n != buf.size:
        raise DistributedError(f"{what}: rank {g.rank} expected {buf.size} bytes ({_describe(like)}) from rank "
                               f"{src} but got {'more' if n > buf.size else n}; send and recv must agree "
                               "on shape and dtype")
    buf[:] = spare[:n]
    return out


def _bytes(x):
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)

