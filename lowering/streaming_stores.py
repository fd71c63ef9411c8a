"""`mirax-streaming-stores`: large elementwise ops write their output with non-temporal
(streaming) vector stores, aligned to cache lines.

A normal store to a line that is not in cache first reads the line (read for ownership),
so an elementwise kernel whose output does not fit in the last-level cache moves its
output bytes twice: a compiled gelu over 512 MB ran at the speed of `x * 2`, 1.3x the
time of a copy of the same bytes, which memcpy does with streaming stores. This pass
rewrites each all-parallel `linalg.generic` on memrefs (after bufferization) that writes
at least `min-bytes` (default: the host's last-level cache, `tuning.py`) into one loop
over its flattened elements:

    linalg.generic ins(%x : memref<16x1000x4096xf32, strided<...>>) outs(%y : ...) { body }
  becomes
    %x1, %y1 = memref.collapse_shape %x, %y [[0, 1, 2]]          (1-d views)
    %head = elements before %y1's first 64-byte boundary (all of them if %y1 is not
            even aligned to its element size)
    scf.for %i = 0 to %head step 16         { masked vector body, normal stores }
    scf.if %backward { (the same two loops over the mirror image of %i) } else {
      scf.for %i = %head to %split step 16  { prefetch; vector body, vector.store
                                              {nontemporal, alignment = 64} }
      scf.for %i = %split to %end step 16   { vector body, non-temporal stores } }
    scf.for %i = %end to 65536000 step 16   { masked vector body, normal stores }

The body runs backward when an input's page offset is a little behind the output's (4K
aliasing). In the middle loops each input is prefetched into L1 `prefetch-bytes` ahead
(tuning.py's `stream_prefetch_bytes`, an eighth of the L1d; behind when the loop runs
backward): with a compute-heavy body the core's window fills with arithmetic and the
next lines' loads start late (gelu over 32x1000x4096 on Emerald Rapids, two threads: 42
-> 27 ms, the copy 26-29). The prefetching loop stops that far from the end (%split), so
no prefetch index needs clamping, and the direction is chosen once, outside the loops:
a per-iteration select of the direction and min/max of the prefetch index made `x * 2`
over 512 MB take 1.07-1.09x the two-thread copy's time, 1.00-1.06x without them (separate
runs, each against the copy in its own run; gelu 1.16 -> 1.15x).

The body's scalar `arith` / `math` ops become the same ops on vectors of one cache line
(16 f32; `vector-bytes`: one register on x86 without AVX-512, below); values defined
outside the op and 0-d inputs are broadcast once. Ops whose
body has anything else (`linalg.index`, ops with regions, index values), whose operands
are not contiguous, of static shape and read with identity maps, or whose outputs differ
in element size stay as they are (LLVM's loop vectorizer widens them, with normal
stores). Smaller outputs keep normal stores too: the next kernel often reads them from
cache.

On x86 without AVX-512 (tuning.py's `vector_min_constants`: 16 vector registers, no
embedded broadcast) the same vector loop, with normal stores, also replaces LLVM's
vectorization of smaller ops that use at least `min-constants` constants (half the
vector registers): LLVM's loop re-broadcasts such constants every iteration, and
`mirax-pin-constants`, which keeps them out of serial loops, works on these loops. gelu
on Zen 3, interleaved in one process: 256x4096 one thread LLVM's loop 845 us, this loop
763 (739 pinned), two threads 452-512 vs 426-506 us; 1024x4096 one thread 3118 vs 2795
(2689 pinned), two threads 1736-1823 vs 1552-1791 us.

There (16 registers, tuning.py's `loop_vector_bytes`) an iteration is one register (8
f32), not a line's two: gelu's line-wide loop held two copies of each temporary, its 15
constants no longer fitted beside them, and LLVM re-broadcast ten of them and spilled a
temporary every iteration. One register, with mirax-pin-constants keeping the constants
as operands: gelu over 32x1000x4096 capped at AVX2 on Zen 4, two threads, interleaved
medians of 15 and 21 rounds: line loop 26.3 / 26.9 ms, register loop 25.9 / 25.5, register
loop pinned 24.2 / 23.9 (the two-thread copy 24.6 / 26.4); in cache (1024x4096, 20 calls a
round) 0.83 / 0.84 ms pinned, unchanged. The non-temporal stores of half a line each fill
one write-combining buffer in turn, as a whole line's did.
"""
from __future__ import annotations

import math
import threading

from mlir import ir

from . import tuning
from .pass_base import MiraxPass, address_of, isa, walk_ops, within

NAME = "mirax-streaming-stores"
STREAMED = "mirax.streamed"  # on the loop of non-temporal stores
_SCALAR_PREFIXES = ("arith.", "math.")


def _identity(m: ir.AffineMap) -> bool:
    return m == ir.AffineMap.get_identity(m.n_dims) and m.n_symbols == 0


def _contiguous(mt: ir.MemRefType) -> bool:
    """Row-major with no gaps (any offset)."""
    layout = mt.layout
    if isa(ir.AffineMapAttr, layout):
        return _identity(ir.AffineMapAttr(layout).value)
    if not isa(ir.StridedLayoutAttr, layout):
        return False
    want, strides = 1, list(ir.StridedLayoutAttr(layout).strides)
    for size, stride in zip(reversed(mt.shape), reversed(strides)):
        if size != 1 and stride != want:
            return False
        want *= size
    return True


def _elem_bytes(t) -> int | None:
    if isa(ir.FloatType, t):
        return ir.FloatType(t).width // 8 if ir.FloatType(t).width % 8 == 0 else None
    if isa(ir.IntegerType, t):
        w = ir.IntegerType(t).width
        return w // 8 if w % 8 == 0 else None
    return None


def _scalar(t) -> bool:
    return isa(ir.FloatType, t) or isa(ir.IntegerType, t)


def _task_count(op) -> int:
    """How many tasks of enclosing `scf.forall`s run copies of `op` (1 when serial)."""
    n, p = 1, op.parent
    while p is not None and p.name != "func.func":
        if p.name == "scf.forall" and "staticUpperBound" in p.attributes:
            n *= math.prod(max(1, int(b)) for b in ir.DenseI64ArrayAttr(p.attributes["staticUpperBound"]))
        p = p.parent
    return n


def eligible(op, min_bytes: int) -> bool:
    """Whether `op` (a linalg.generic) gets streaming stores: see the module docstring."""
    its = [str(a) for a in op.attributes["iterator_types"]]
    if any("parallel" not in s for s in its):
        return False
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    if len(op.results):  # on tensors: not bufferized yet
        return False
    ins, outs = _split(op)
    if not outs:
        return False
    shape = None
    for v, m in zip(list(ins) + list(outs), maps):
        if not isa(ir.MemRefType, v.type):
            return False
        mt = ir.MemRefType(v.type)
        if len(m.results) == 0 and mt.rank == 0:
            continue  # a 0-d input, broadcast
        if not (_identity(m) and mt.has_static_shape and _contiguous(mt)):
            return False
        if shape is None:
            shape = list(mt.shape)
        elif list(mt.shape) != shape:
            return False
        if _elem_bytes(mt.element_type) is None:
            return False
    sizes = {_elem_bytes(ir.MemRefType(v.type).element_type) for v in outs}
    if shape is None or len(sizes) != 1 or any(ir.MemRefType(v.type).rank == 0 for v in outs):
        return False
    block = op.regions[0].blocks[0]
    for a in block.arguments:
        if not _scalar(a.type):
            return False
    for o in block.operations:
        o = o.operation
        if o.name == "linalg.yield":
            continue
        if not o.name.startswith(_SCALAR_PREFIXES) or len(o.regions):
            return False
        if any(not _scalar(r.type) for r in o.results):
            return False
    return math.prod(shape) * sizes.pop() * _task_count(op) >= min_bytes


def _split(op):
    n_in = int(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0])
    ops = list(op.operands)
    return ops[:n_in], ops[n_in:]


# value -> index constant, per rewrite (one op each, not one per use); per thread: threads
# compile modules of their own at once, and a constant of another thread's module is
# invalid IR in this one (an abort)
_state = threading.local()


def _index(value: int):
    from mlir.dialects import arith
    constants = _state.constants
    if value not in constants:
        constants[value] = arith.ConstantOp(ir.IndexType.get(), value).result
    return constants[value]


def _flat(v, n: int):
    """`v` as a 1-d memref of its n elements (a view)."""
    from mlir.dialects import memref
    mt = ir.MemRefType(v.type)
    if mt.rank == 1:
        return v
    layout = None if isa(ir.AffineMapAttr, mt.layout) else ir.StridedLayoutAttr.get(
        ir.StridedLayoutAttr(mt.layout).offset, [1])
    flat = ir.MemRefType.get([n], mt.element_type, layout, mt.memory_space)
    return memref.CollapseShapeOp(flat, v, ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i) for i in range(mt.rank)])])).result


def _head(addr, esize: int, line: int, n: int):
    """Elements before address `addr`'s first `line`-byte boundary: min(n, ...), and n
    when the address is not a multiple of the element size."""
    from mlir.dialects import arith
    mis = arith.RemUIOp(addr, _index(line)).result
    gap = arith.RemUIOp(arith.SubIOp(_index(line), mis).result, _index(line)).result  # bytes to the boundary
    odd = arith.CmpIOp(arith.CmpIPredicate.ne, arith.RemUIOp(addr, _index(esize)).result, _index(0)).result
    head = arith.MinUIOp(arith.DivUIOp(gap, _index(esize)).result, _index(n)).result
    return arith.SelectOp(odd, _index(n), head).result


# 4K aliasing: a load whose address matches a pending store's in the low 12 bits waits
# for it. Going forward, an input that starts a little *behind* the output in those bits
# (the output's page offset 16-240 bytes past the input's) has each load meet the
# stores just issued: gelu over 512 MB ran at 1.7-1.9x the time of the same kernel with
# equal offsets (Zen 4). glibc's memmove copies backward then; so does this loop.
PAGE, NEAR = 4096, 256


def _backward(out_addr, in_addrs):
    """i1: run the body loop backward (some input is NEAR behind the output in page
    offset, and none is NEAR ahead of it)."""
    from mlir.dialects import arith

    def near(diff):  # 0 < diff mod PAGE < NEAR
        m = arith.RemUIOp(diff, _index(PAGE)).result
        return arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ugt, m, _index(0)).result,
                            arith.CmpIOp(arith.CmpIPredicate.ult, m, _index(NEAR)).result).result

    def any_of(flags):
        acc = flags[0]
        for f in flags[1:]:
            acc = arith.OrIOp(acc, f).result
        return acc
    behind = any_of([near(arith.SubIOp(out_addr, a).result) for a in in_addrs])
    ahead = any_of([near(arith.SubIOp(a, out_addr).result) for a in in_addrs])
    true = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
    return arith.AndIOp(behind, arith.XOrIOp(ahead, true).result).result


class _Vectorizer:
    """The generic's body as ops on vector<W x T>, emitted once per loop."""

    def __init__(self, op, ins, outs, width: int):
        self.op, self.ins, self.outs, self.width = op, ins, outs, width
        self.block = op.regions[0].blocks[0]
        self.hoisted: dict = {}  # values from outside the op (and 0-d inputs) -> broadcast vectors

    def vtype(self, t):
        return ir.VectorType.get([self.width], t)

    def prepare(self):
        """Broadcasts of the body's outside values and 0-d inputs (before the loops)."""
        from mlir.dialects import memref, vector
        args = list(self.block.arguments)
        for a, v in zip(args, self.ins + self.outs):
            if ir.MemRefType(v.type).rank == 0 and len(list(a.uses)):
                s = memref.LoadOp(v, []).result
                self.hoisted[a] = vector.BroadcastOp(self.vtype(a.type), s).result
        for o in self.block.operations:
            for v in o.operation.operands:
                if v in self.hoisted or any(v == a for a in args):
                    continue
                owner = v.owner
                inside = not isinstance(owner, ir.Block) and within(owner, self.op)
                if isinstance(owner, ir.Block) and owner == self.block:
                    inside = True
                if not inside and _scalar(v.type):
                    self.hoisted[v] = vector.BroadcastOp(self.vtype(v.type), v).result

    def emit(self, i, mask=None, stream=False, line=64):
        """The body at element `i` of the flat views: loads, the ops, stores (masked by
        `mask`, or non-temporal and `line`-aligned when `stream`)."""
        from mlir.dialects import arith, vector
        vmap = dict(self.hoisted)
        args = list(self.block.arguments)
        for a, v in zip(args, self.ins + self.outs):
            if a in vmap or not len(list(a.uses)):
                continue
            vt = self.vtype(a.type)
            if mask is None:
                vmap[a] = vector.LoadOp(vt, v, [i]).result
            else:
                zero = arith.ConstantOp(vt, ir.DenseElementsAttr.get_splat(vt, _zero(a.type))).result
                vmap[a] = vector.MaskedLoadOp(vt, v, [i], mask, zero).result
        for o in self.block.operations:
            o = o.operation
            if o.name == "linalg.yield":
                for val, out in zip(o.operands, self.outs):
                    x = vmap[val] if val in vmap else self.hoisted[val]
                    if mask is not None:
                        vector.MaskedStoreOp(out, [i], mask, x)
                    elif stream:
                        vector.StoreOp(x, out, [i], nontemporal=True, alignment=line)
                    else:
                        vector.StoreOp(x, out, [i])
                continue
            if o.name == "arith.constant":
                vt = self.vtype(o.results[0].type)
                attr = ir.DenseElementsAttr.get_splat(vt, o.attributes["value"])
                vmap[o.results[0]] = arith.ConstantOp(vt, attr).result
                continue
            new = ir.Operation.create(
                o.name, results=[self.vtype(r.type) for r in o.results],
                operands=[vmap[v] for v in o.operands],
                attributes={k: o.attributes[k] for k in o.attributes})
            for old, r in zip(o.results, new.results):
                vmap[old] = r


def _zero(t):
    return ir.FloatAttr.get(t, 0.0) if isa(ir.FloatType, t) else ir.IntegerAttr.get(t, 0)


def constants(op) -> int:
    """How many distinct scalar constants `op`'s body uses (its own and hoisted ones)."""
    seen = set()
    block = op.regions[0].blocks[0]
    for o in block.operations:
        o = o.operation
        if o.name == "arith.constant":
            seen.add(o.results[0])
        for v in o.operands:
            owner = v.owner
            if not isinstance(owner, ir.Block) and owner.name == "arith.constant" and not within(owner, op):
                seen.add(v)
    return len(seen)


def _prefetch_elements(flat_in, distance: int) -> dict:
    """{input: how many of its elements make `distance` bytes} for the 1-d inputs."""
    out = {}
    for k, v in enumerate(flat_in):
        mt = ir.MemRefType(v.type)
        d = distance // (_elem_bytes(mt.element_type) or 1)
        if mt.rank == 1 and d > 0:
            out[k] = d
    return out


def _prefetch(flat_in, j, backward: bool, ahead: dict) -> None:
    """In the streamed loop at element `j`: each input of `ahead` read that many elements
    ahead (behind when the loop runs `backward`), into L1. The caller keeps the index
    within the input (the loop stops prefetching that far from its end)."""
    from mlir.dialects import arith, memref
    for k, d in ahead.items():
        at = (arith.SubIOp if backward else arith.AddIOp)(j, _index(d)).result
        memref.PrefetchOp(flat_in[k], [at], False, 3, True)


def rewrite(op, line: int, stream: bool = True, vector_bytes: int | None = None, prefetch: int = 0) -> None:
    """Replace `op` (eligible) by the three loops of the module docstring, each iteration
    `vector_bytes` of the output (default: a line), its inputs prefetched `prefetch` bytes
    ahead (0: not); unless `stream`, by the body (normal stores) and the masked tail only:
    no head up to a line boundary, no backward run, no prefetches (they are for outputs
    and inputs beyond the caches), less to compile."""
    from mlir.dialects import arith, scf, vector
    ins, outs = _split(op)
    shape = next(ir.MemRefType(v.type).shape for v in outs)
    n = math.prod(shape)
    esize = _elem_bytes(ir.MemRefType(outs[0].type).element_type)
    width = max(1, min(line, vector_bytes or line) // esize)
    _state.constants = {}
    with ir.InsertionPoint(op), op.location:
        flat_in = [v if ir.MemRefType(v.type).rank == 0 else _flat(v, n) for v in ins]
        flat_out = [_flat(v, n) for v in outs]
        vec = _Vectorizer(op, flat_in, flat_out, width)
        vec.prepare()
        out_addr = address_of(flat_out[0], esize, _index) if stream else None
        head = _head(out_addr, esize, line, n) if stream else _index(0)
        span = arith.SubIOp(_index(n), head).result
        end = arith.AddIOp(head, arith.MulIOp(arith.DivUIOp(span, _index(width)).result,
                                              _index(width)).result).result
        step = _index(width)
        mtype = ir.VectorType.get([width], ir.IntegerType.get_signless(1))

        def masked_loop(lo, hi):
            loop = scf.ForOp(lo, hi, step)
            with ir.InsertionPoint(loop.body):
                i = loop.induction_variable
                left = arith.SubIOp(hi, i).result
                mask = vector.CreateMaskOp(mtype, [left]).result
                vec.emit(i, mask=mask)
                scf.YieldOp([])

        backward = None
        if stream:
            masked_loop(_index(0), head)
            in_addrs = [address_of(v, _elem_bytes(ir.MemRefType(v.type).element_type), _index)
                        for v in flat_in if ir.MemRefType(v.type).rank == 1]
            backward = _backward(arith.AddIOp(out_addr, arith.MulIOp(head, _index(esize)).result).result,
                                 in_addrs) if in_addrs else None
        ahead = _prefetch_elements(flat_in, prefetch) if stream and prefetch else {}
        # (index constants are shared: made here, before the branch below, they dominate both sides)
        far = _index(-(-max(ahead.values()) // width) * width) if ahead else None
        for d in ahead.values():
            _index(d)
        span_body = arith.SubIOp(end, head).result if ahead else None
        last = arith.SubIOp(arith.AddIOp(head, end).result, step).result if backward is not None else None

        def streamed(lo, hi, backward, fetch):
            """[lo, hi) in steps (mirrored when `backward`), prefetching when `fetch`."""
            loop = scf.ForOp(lo, hi, step)
            if stream:  # (the CPU pipeline schedules the thread loops around it dynamically)
                loop.operation.attributes[STREAMED] = ir.UnitAttr.get()
            with ir.InsertionPoint(loop.body):
                i = loop.induction_variable
                if backward:  # the mirror image of i in [head, end)
                    i = arith.SubIOp(last, i).result
                if fetch:
                    _prefetch(flat_in, i, backward, ahead)
                vec.emit(i, stream=stream, line=width * esize)  # (the stores' alignment: one iteration's bytes)
                scf.YieldOp([])

        def direction(backward):
            # Prefetching iterations first, up to the last `far` elements (the farthest
            # prefetch rounded up to iterations), then the rest without: no index to clamp
            # an iteration (module docstring).
            if not ahead:
                streamed(head, end, backward, False)
                return
            split = arith.SubIOp(end, arith.MinUIOp(span_body, far).result).result
            streamed(head, split, backward, True)
            streamed(split, end, backward, False)

        if backward is None:
            direction(False)
        else:  # the direction chosen once, outside the loops (a select an iteration cost as much)
            branch = scf.IfOp(backward, [], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                direction(True)
                scf.YieldOp([])
            with ir.InsertionPoint(branch.else_block):
                direction(False)
                scf.YieldOp([])
        masked_loop(end, _index(n))
    _state.constants = {}
    op.erase()


class MiraxStreamingStores(MiraxPass):
    name = NAME
    summary = "Large all-parallel linalg.generic on memrefs -> vector loops with non-temporal stores"
    options = {"min-bytes": (0, "smallest output (bytes, all tasks together) to stream (0: tuning.py's, the host's last-level cache)"),
               "line": (0, "bytes the streamed loop's head aligns the output to (0: tuning.py's cache line)"),
               "vector-bytes": (0, "bytes of the output an iteration computes and stores, at most a line "
                                   "(0: tuning.py's loop_vector_bytes: one register on x86 without AVX-512, "
                                   "else a line)"),
               "prefetch-bytes": (-1, "how far ahead the streamed loop prefetches its inputs into L1 "
                                      "(0: not; -1: tuning.py's stream_prefetch_bytes, an eighth of the L1d)"),
               "min-constants": (-1, "smaller ops using this many constants get the vector loop too, with "
                                     "normal stores (0: none; -1: tuning.py's, half the vector registers "
                                     "where constants are pinned)")}

    def run(self, module):
        cfg = tuning.table()["elementwise"]
        min_bytes = int(self.opts["min-bytes"]) or cfg["streaming_store_bytes"]
        line = int(self.opts["line"]) or cfg["line_bytes"]
        vbytes = int(self.opts["vector-bytes"]) or cfg["loop_vector_bytes"]
        heavy = int(self.opts["min-constants"])
        heavy = cfg["vector_min_constants"] if heavy < 0 else heavy
        ahead = int(self.opts["prefetch-bytes"])
        ahead = cfg["stream_prefetch_bytes"] if ahead < 0 else ahead
        with module.context:
            for op in walk_ops(module, lambda n: n == "linalg.generic"):
                if eligible(op, min_bytes):
                    rewrite(op, line, vector_bytes=vbytes, prefetch=ahead)
                elif heavy and eligible(op, 0) and constants(op) >= heavy:
                    rewrite(op, line, stream=False, vector_bytes=vbytes)
