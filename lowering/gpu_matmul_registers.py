"""`mirax-gpu-matmul-registers`: a matmul kernel's block of C accumulates in registers.

The matmul strategy of `mirax-gpu-map` leaves, inside each `gpu.launch`, a K loop whose
body stages the A and B tiles in workgroup memory (space 3) and then lets every thread
update its 2x2 block of C in global memory once per K step:

    scf.for %k = 0 to K step 16 {            // the A, B tiles: memref<..., 3>, barriers
      scf.for %i = 0 to 2 { scf.for %j = 0 to 2 { scf.for %kk = 0 to 16 {
        %c = memref.load %C[f(%i, ids), g(%j, ids)]
        memref.store (%c + a * b), %C[f(%i, ids), g(%j, ids)] }}}}

This pass keeps that block in a private array (SPIR-V Function storage, registers after
the driver's compiler) for the whole K loop: loaded once before it, stored once after it,

    %acc = memref.alloca() : memref<2x2xf32, 6>
    (for i, j: %acc[i, j] = %C[f(i), g(j)])
    scf.for %k ... { ... %acc[%i, %j] += a * b ... }
    (for i, j: %C[f(i), g(j)] = %acc[i, j])

which is legal because the C element a thread updates depends only on its ids and %i,
%j (checked: the indices are computed from those alone), so no other thread reads or
writes it while the loop runs.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf

from .pass_base import WORKGROUP, constant_int, defining_op, memory_space, private_memref_type, walk_ops, within


def _loops(block):
    return [o.operation for o in block.operations if o.operation.name == "scf.for"]


def _index_ops(v, allowed, inside):
    """The ops (in order) computing index `v` from `allowed` values and values defined
    outside `inside`; None if it reads anything else (another loop's iv, memory)."""
    out = []

    def visit(x):
        if x in allowed:
            return True
        op = defining_op(x)
        if op is None:
            return False  # a block argument we do not know (e.g. the K loop's iv)
        if not within(op.parent, inside):  # (strictly inside)
            return True  # defined above the compute nest: thread / block ids, constants
        if op.name not in ("affine.apply", "arith.constant", "arith.addi", "arith.muli", "gpu.thread_id",
                           "gpu.block_id"):
            return False
        if not all(visit(o) for o in op.operands):
            return False
        if all(op != p for p in out):
            out.append(op)
        return True
    return out if visit(v) else None


def _same(a, b):
    """Two index values computed the same way (the load's and the store's address)."""
    if a == b:
        return True
    x, y = defining_op(a), defining_op(b)
    if x is None or y is None or x.name != "affine.apply" or y.name != "affine.apply":
        return False
    return str(x.attributes["map"]) == str(y.attributes["map"]) and len(x.operands) == len(y.operands) \
        and all(_same(p, q) for p, q in zip(x.operands, y.operands))


def _rewrite(kloop, outer, middle, inner, load, store):
    i_iv, j_iv = outer.regions[0].blocks[0].arguments[0], middle.regions[0].blocks[0].arguments[0]
    c_mem = load.operands[0]
    lidx, sidx = list(load.operands)[1:], list(store.operands)[2:]
    if len(lidx) != len(sidx) or not all(_same(a, b) for a, b in zip(lidx, sidx)):
        return False
    # computed from the nest's ivs and values defined before the K loop only (what is
    # computed inside the K loop is cloned too, so it must not read the K loop's iv)
    chains = [_index_ops(v, {i_iv, j_iv}, kloop) for v in lidx]
    if any(c is None for c in chains):
        return False
    ni, nj = constant_int(outer.operands[1]), constant_int(middle.operands[1])
    if None in (ni, nj) or constant_int(outer.operands[0]) != 0 or constant_int(middle.operands[0]) != 0 \
            or constant_int(outer.operands[2]) != 1 or constant_int(middle.operands[2]) != 1:
        return False
    elt = ir.MemRefType(c_mem.type).element_type
    acc_t = private_memref_type([ni, nj], elt)
    idx = ir.IndexType.get()

    def nest(ip, body):
        """for i in [0, ni), j in [0, nj): body(i, j, mapping) at `ip`."""
        with ip:
            zero, one = arith.ConstantOp(idx, 0).result, arith.ConstantOp(idx, 1).result
            li = scf.ForOp(zero, arith.ConstantOp(idx, ni).result, one)
        with ir.InsertionPoint(li.body):
            lj = scf.ForOp(zero, arith.ConstantOp(idx, nj).result, one)
            scf.YieldOp([])
        with ir.InsertionPoint(lj.body):
            body(li.induction_variable, lj.induction_variable)
            scf.YieldOp([])

    def c_indices(i, j):
        """Clone the index computations with (i, j) for the compute nest's ivs."""
        mapping = {i_iv: i, j_iv: j}
        out = []
        for chain, v in zip(chains, lidx):
            for op in chain:
                c = op.clone()
                for n, o in enumerate(c.operands):
                    for old, new in mapping.items():
                        if o == old:
                            c.operands[n] = new
                mapping[op.results[0]] = c.results[0]
            out.append(mapping.get(v, v))
        return out

    with kloop.context, kloop.location:
        with ir.InsertionPoint(kloop):
            acc = memref.AllocaOp(acc_t, [], []).result

        def load_c(i, j):
            memref.StoreOp(memref.LoadOp(c_mem, c_indices(i, j)).result, acc, [i, j])

        def store_c(i, j):
            memref.StoreOp(memref.LoadOp(acc, [i, j]).result, c_mem, c_indices(i, j))
        nest(ir.InsertionPoint(kloop), load_c)
        nest(ir.InsertionPoint.after(kloop), store_c)
        with ir.InsertionPoint(load):
            new_load = memref.LoadOp(acc, [i_iv, j_iv])
        load.results[0].replace_all_uses_with(new_load.result)
        with ir.InsertionPoint(store):
            memref.StoreOp(store.operands[0], acc, [i_iv, j_iv])
    load.erase()
    store.erase()
    return True


def matmul_accumulators_in_registers(module, *_):
    for launch in walk_ops(module, lambda n: n == "gpu.launch"):
        for kloop in _loops(launch.regions[0].blocks[0]):
            body = kloop.regions[0].blocks[0]
            if not any(o.operation.name == "memref.alloc" and memory_space(o.operation.results[0].type) == WORKGROUP
                       for o in body.operations):
                continue  # not a K loop staging tiles in workgroup memory
            for outer in _loops(body):
                middle = _loops(outer.regions[0].blocks[0])
                inner = _loops(middle[0].regions[0].blocks[0]) if len(middle) == 1 else []
                if len(inner) != 1:
                    continue
                ops = [o.operation for o in inner[0].regions[0].blocks[0].operations]
                loads = [o for o in ops if o.name == "memref.load" and memory_space(o.operands[0].type) is None]
                stores = [o for o in ops if o.name == "memref.store" and memory_space(o.operands[1].type) is None]
                if len(loads) == 1 and len(stores) == 1 and loads[0].operands[0] == stores[0].operands[1]:
                    _rewrite(kloop, outer, middle[0], inner[0], loads[0], stores[0])
