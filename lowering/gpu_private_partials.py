"""`mirax-gpu-private-partials`: a thread's running partial stays in a register.

The row strategy of `mirax-gpu-map` gives each thread one slot of a workgroup buffer
(space 3) for its partial reduction and updates that slot once per element it visits:

    scf.for %k = 0 to %n {
      %p = memref.load %partials[%c0, %tid] : memref<1x256xf32, 3>
      memref.store (%p max x[k]), %partials[%c0, %tid] }

a workgroup-memory load and store on every step's dependency chain. This pass keeps the
slot in a private variable (space 6: a SPIR-V Function variable, a register once the
driver's compiler promotes it) for the loop and writes the slot back once after it:

    %r = memref.alloca() : memref<1xf32, 6>     %r[0] = %partials[%c0, %tid]
    scf.for %k ... { %p = %r[0] ... %r[0] = ... }
    %partials[%c0, %tid] = %r[0]

Legal when the slot is the thread's own: every access to the buffer from the barrier
before the loop to the barrier after it (in the kernel's top-level block, in a
one-dimensional workgroup) uses the same constant indices and the thread's x id last, so
no other thread touches the slot while the loop runs; and the loop has no barrier.

Then a top-level barrier is dropped where it orders no thread's workgroup access against
another's (every buffer stored to on one side and accessed on the other is accessed only
at the thread's own slot): the barrier between a partial's initial store and its loop,
and between one reduction's last read and the next one's initial stores, which the
thread mapping puts after every thread loop. Kernels that take views of, copy or pass
workgroup memory keep all their barriers.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref

from .pass_base import (WORKGROUP, constant_int, defining_op, isa, memory_space, one_dim_kernels,
                        only_loaded_and_stored, private_memref_type, walk_ops, within)

NAME = "mirax-gpu-private-partials"


def _access(op):
    """(buffer, indices) of a memref.load / memref.store."""
    if op.name == "memref.load":
        return op.operands[0], list(op.operands)[1:]
    return op.operands[1], list(op.operands)[2:]


def _slot_key(indices):
    """(0, ..., 'tid') for constant indices then the thread's x id (its own slot), else None."""
    key = []
    for i, v in enumerate(indices):
        op = defining_op(v)
        if op is None:
            return None
        if op.name == "arith.constant" and i < len(indices) - 1:
            key.append(constant_int(v))
        elif op.name == "gpu.thread_id" and i == len(indices) - 1 and str(op.attributes["dimension"]).endswith("x>"):
            key.append("tid")
        else:
            return None
    return tuple(key)


def _loads_stores(root):
    """The memref.loads and memref.stores of `root`, itself included."""
    return ([root] if root.name in ("memref.load", "memref.store") else []) \
        + walk_ops(root, lambda n: n in ("memref.load", "memref.store"))


def _accesses(root, buffer):
    return [op for op in _loads_stores(root) if _access(op)[0] == buffer]


def _segment(entry, pos):
    """The indices of the top-level barriers around entry[pos] (-1 / len(entry) if none)."""
    lo = max([i for i in range(pos) if entry[i].name == "gpu.barrier"], default=-1)
    hi = min([i for i in range(pos + 1, len(entry)) if entry[i].name == "gpu.barrier"], default=len(entry))
    return lo, hi


def private_partials(module, *_):
    """Rewrite each thread-owned workgroup slot a top-level loop updates, then drop the
    barriers left ordering only thread-owned slots (see the module doc)."""
    for func, _ in one_dim_kernels(module):
        entry = [op.operation for op in func.regions[0].blocks[0].operations]
        for pos, loop in enumerate(entry):
            if loop.name != "scf.for" or walk_ops(loop, lambda n: n == "gpu.barrier"):
                continue
            buffers = []
            for op in walk_ops(loop, lambda n: n in ("memref.load", "memref.store")):
                b = _access(op)[0]
                if memory_space(b.type) == WORKGROUP and b not in buffers and only_loaded_and_stored(b):
                    buffers.append(b)
            for b in buffers:
                _privatize(entry, pos, loop, b)
        _drop_needless_barriers(func)


def _drop_needless_barriers(func):
    """Erase each top-level barrier that orders no access of one thread against another
    thread's: for every workgroup buffer accessed on both sides (up to the neighbouring
    barriers) by at least one store, all those accesses are the thread's own slot. (A
    row kernel's barrier between a partial's initial store and its loop, once the loop
    works in a register.)"""
    ops = walk_ops(func, lambda n: True)
    if any(memory_space(v.type) == WORKGROUP for op in ops if op.name not in ("memref.load", "memref.store",
                                                                              "memref.alloc", "memref.dealloc")
           for v in list(op.operands) if isa(ir.MemRefType, v.type)):
        return  # a view, copy or call of workgroup memory: accesses we would not see
    changed = True
    while changed:
        changed = False
        entry = [op.operation for op in func.regions[0].blocks[0].operations]
        for i in [i for i, op in enumerate(entry) if op.name == "gpu.barrier"]:
            lo, hi = _segment(entry, i)
            if _orders_nothing(entry[lo + 1:i], entry[i + 1:hi]):
                entry[i].erase()
                changed = True
                break


def _workgroup_accesses(ops):
    out = {}
    for op in ops:
        for a in _loads_stores(op):
            b, idx = _access(a)
            if memory_space(b.type) == WORKGROUP:
                out.setdefault(b, []).append((a.name == "memref.store", _slot_key(idx)))
    return out


def _orders_nothing(before, after):
    b, a = _workgroup_accesses(before), _workgroup_accesses(after)
    for buf in set(b) & set(a):
        acc = b[buf] + a[buf]
        if not any(store for store, _ in acc):
            continue  # reads on both sides
        keys = {key for _, key in acc}
        if len(keys) != 1 or None in keys:
            return False
    return True


def _privatize(entry, pos, loop, buffer):
    inside = _accesses(loop, buffer)
    keys = {_slot_key(_access(op)[1]) for op in inside}
    if len(keys) != 1 or None in keys:
        return
    key = keys.pop()
    # the segment between the barriers around the loop touches only this thread's slot
    lo, hi = _segment(entry, pos)
    for op in entry[lo + 1:hi]:
        if op != loop and any(_slot_key(_access(a)[1]) != key for a in _accesses(op, buffer)):
            return
    indices = _access(inside[0])[1]
    if any(within(defining_op(v), loop) for v in indices):
        return  # (constants or ids computed in the loop: not available before it)
    t = ir.MemRefType(buffer.type)
    idx = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        reg = memref.AllocaOp(private_memref_type([1], t.element_type), [], []).result
        zero = arith.ConstantOp(idx, 0).result
        memref.StoreOp(memref.LoadOp(buffer, indices).result, reg, [zero])
    for op in inside:
        with ir.InsertionPoint(op), op.location:
            if op.name == "memref.load":
                new = memref.LoadOp(reg, [zero]).result
                op.results[0].replace_all_uses_with(new)
            else:
                memref.StoreOp(op.operands[0], reg, [zero])
        op.erase()
    after = entry[pos + 1]
    with ir.InsertionPoint(after), loop.location:
        memref.StoreOp(memref.LoadOp(reg, [zero]).result, buffer, indices)
