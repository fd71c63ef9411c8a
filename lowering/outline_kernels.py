"""`mirax-outline-kernels`: move each loop nest of a large function into a private
function of its own, called in order, with identical loop nests sharing one function,
so that LLVM compiles many small functions (each once) instead of one huge one.

LLVM's -O2 pipeline grows faster than linearly with a function's size: a compiled
chain of 10,000 elementwise ops spent 14 s in LLVM as one function (0.3 s at -O0).
After bufferization each kernel is one top-level op with regions (a `linalg` op, an
`scf.for`/`scf.forall` nest) among allocations, deallocations and reshapes. In
functions of at least `min-ops` nested ops, every such kernel moves into
`@<f>_part<i>`, marked `noinline` (LLVM would inline a private function called once
straight back); allocations, deallocations, reshapes and copies stay in the caller.
Constants used inside are cloned in; other values become arguments.

What keeps the LLVM IR (and LLVM's time) small:

- memrefs of static shape and layout are passed as their aligned pointer alone (an
  `!llvm.ptr`); the part rebuilds the descriptor from the type, so LLVM folds it away.
  A memref passed whole becomes 3 + 2 * rank scalar arguments at each call, and calls
  with hundreds of arguments (one per descriptor field) cost LLVM's instruction
  selection quadratic time (its store merging over the stack arguments);
- a part the same as an earlier one (the same kernel on buffers of the same types: the
  layers of a network, the optimizer's update of same-shaped parameters) is not emitted
  again: both sites call the first. The functions it outlines lose their locations
  (`strip-debuginfo`) so that kernels from different places compare equal;
- a function with a C interface (`llvm.emit_c_interface`, all arguments memrefs, no
  results) becomes `_mlir_ciface_<f>` itself, loading its descriptors from the pointers
  it is given, instead of the upstream wrapper calling `<f>` with every descriptor
  field as an argument (a 184-memref training step made that call 1,108 arguments).

    func.func @main(%a: memref<8xf32>, %b: memref<8xf32>) { scf.for ... { a -> t } ... }
  becomes
    func.func @_mlir_ciface_main(%pa: !llvm.ptr, %pb: !llvm.ptr) {
      %a = unrealized_conversion_cast (llvm.load %pa) ...      (the descriptors)
      %t = memref.alloc() ...
      call @main_part0(ptr(%a), ptr(%t))                        (aligned pointers)
      ...
    func.func private @main_part0(%p0: !llvm.ptr, %p1: !llvm.ptr) attributes {passthrough = ["noinline"]} {
      %a = unrealized_conversion_cast (descriptor of %p0 with memref<8xf32>'s sizes) ...
      scf.for ... }

Functions below `min-ops` nested ops are left alone (a call costs next to nothing, but
small functions gain nothing either).
"""
from __future__ import annotations

import io

from mlir import ir
from mlir.dialects import func

from .pass_base import (MiraxPass, clone_mapped, count_ops, defining_op, distinct_names, outside_values,
                        strip_locations, walk_ops)

NAME = "mirax-outline-kernels"
MIN_OPS = 1000
CIFACE = "llvm.emit_c_interface"


def _is_constant(op) -> bool:
    """An op the part can clone instead of taking its value: no operands, no regions,
    one non-memref result (arith.constant, ub.poison, llvm.mlir.constant ...)."""
    return (op is not None and not len(op.operands) and not len(op.regions) and len(op.results) == 1
            and not str(op.results[0].type).startswith("memref<"))


# ---- memref descriptors --------------------------------------------------------------

def _static_layout(t: ir.MemRefType):
    """(sizes, strides, offset) of a memref type whose descriptor is fully static, else None."""
    if not t.has_static_shape or t.memory_space is not None:
        return None
    sizes = list(t.shape)
    try:
        strides, offset = t.get_strides_and_offset()
    except (ValueError, RuntimeError):
        return None
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    if offset == dyn or any(s == dyn for s in strides):
        return None
    return sizes, list(strides), offset


def _descriptor_type(rank: int) -> ir.Type:
    if rank == 0:
        return ir.Type.parse("!llvm.struct<(ptr, ptr, i64)>")
    return ir.Type.parse(f"!llvm.struct<(ptr, ptr, i64, array<{rank} x i64>, array<{rank} x i64>)>")


def _cast(value, to_type):
    return ir.Operation.create("builtin.unrealized_conversion_cast", results=[to_type], operands=[value]).results[0]


def _memref_from_pointer(ptr, t: ir.MemRefType, layout):
    """The memref of type `t` (static layout) whose aligned (and allocated) pointer is `ptr`.
    (Generic `Operation.create`s: the llvm dialect's Python builders took twice as long,
    ~60 us a descriptor, 5% of this pass on a transformer step.)"""
    sizes, strides, offset = layout
    st = _descriptor_type(len(sizes))
    i64 = ir.IntegerType.get_signless(64)

    def insert(d, v, *position):
        return ir.Operation.create("llvm.insertvalue", results=[st], operands=[d, v],
                                   attributes={"position": ir.DenseI64ArrayAttr.get(list(position))}).results[0]

    def constant(n):
        return ir.Operation.create("llvm.mlir.constant", results=[i64],
                                   attributes={"value": ir.IntegerAttr.get(i64, n)}).results[0]
    d = ir.Operation.create("llvm.mlir.poison", results=[st]).results[0]
    d = insert(insert(insert(d, ptr, 0), ptr, 1), constant(offset), 2)
    for i, (n, s) in enumerate(zip(sizes, strides)):
        d = insert(insert(d, constant(n), 3, i), constant(s), 4, i)
    return _cast(d, t)


def _pointer_of(memref_value):
    """The aligned pointer of a memref as an `!llvm.ptr` (inserted at the current point)."""
    from mlir.dialects import arith, llvm, memref
    i64 = ir.IntegerType.get_signless(64)
    idx = memref.extract_aligned_pointer_as_index(memref_value)
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr"), arith.index_cast(i64, idx))


def _freed_inside(op) -> set:
    """The memrefs an op in `op` frees or reallocates (they need the allocated pointer,
    not only the aligned one)."""
    return {o.operands[0] for o in walk_ops(op, lambda n: n in ("memref.dealloc", "memref.realloc"))}


# ---- outlining -------------------------------------------------------------------------

def _is_kernel(op) -> bool:
    """A top-level op that becomes a part: one with regions (a loop nest, a linalg op)
    whose results, if any, are not memrefs."""
    return (len(op.regions) > 0 and op.name not in ("func.func",)
            and all(not str(r.type).startswith("memref<") for r in op.results))


def _outline(fn, op, name, after, parts, pointers):
    """Move the top-level op `op` of `fn` into a private function (or reuse an identical
    one from `parts`: signature -> [[name, function, bytecode or None]]); returns the op a
    new function follows.
    `pointers` caches the aligned pointer taken of a memref in `fn` (value -> pointer)."""
    consts, captured = outside_values([op], _is_constant)
    freed = _freed_inside(op)
    ptr_t = ir.Type.parse("!llvm.ptr")
    arg_types, layouts = [], []
    for v in captured:
        layout = None
        if isinstance(v.type, ir.MemRefType) or str(v.type).startswith("memref<"):
            t = ir.MemRefType(v.type)
            layout = _static_layout(t)
            if layout is not None and v in freed:
                layout = None
        layouts.append(layout)
        arg_types.append(ptr_t if layout is not None else v.type)
    result_types = [r.type for r in op.results]
    module_block = fn.parent.regions[0].blocks[0]
    ftype = ir.FunctionType.get(arg_types, result_types)
    with ir.InsertionPoint(module_block):
        new = func.FuncOp(name, ftype, visibility="private")
    new.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
    entry = new.add_entry_block()
    mapping = {}
    with ir.InsertionPoint(entry):
        for v, a, layout in zip(captured, entry.arguments, layouts):
            mapping[v] = a if layout is None else _memref_from_pointer(a, ir.MemRefType(v.type), layout)
        for v in consts:
            mapping[v] = defining_op(v).clone().results[0]
        body = clone_mapped(op, mapping)
        func.ReturnOp(list(body.results))
    # an identical part already emitted: call it and drop this one. Parts are compared by
    # bytecode only when their signatures (types, the names of their ops) match: most
    # have none to match, and printing every part was a third of this pass
    sig = (tuple(arg_types), tuple(result_types), op.name, distinct_names(op))
    candidates = parts.setdefault(sig, [])
    callee, key = None, None
    if candidates:
        key = _bytecode(new.operation, name)
        for c in candidates:  # [name, function, its bytecode once written]
            if c[2] is None:
                c[2] = _bytecode(c[1], c[0])
            if c[2] == key:
                callee = c[0]
                break
    if callee is None:
        candidates.append([name, new.operation, key])
        callee = name
        new.operation.move_after(after)
        after = new.operation
    else:
        new.operation.erase()
    with ir.InsertionPoint(op), op.location:
        args = []
        for v, layout in zip(captured, layouts):
            if layout is not None:
                if v not in pointers:
                    pointers[v] = _pointer_of(v)
                v = pointers[v]
            args.append(v)
        call = func.CallOp(result_types, ir.FlatSymbolRefAttr.get(callee), args)
    for r, nr in zip(op.results, call.results):
        r.replace_all_uses_with(nr)
    op.erase()
    return after


def _bytecode(part, name) -> bytes:
    """A part's bytecode under a common name (what identical parts share): its bytecode,
    not its text, as bytecode is written ~4x as fast as the text is printed."""
    part.attributes["sym_name"] = ir.StringAttr.get("__part")
    out = io.BytesIO()
    part.write_bytecode(out)
    part.attributes["sym_name"] = ir.StringAttr.get(name)
    return out.getvalue()


def _c_interface_in_place(fn):
    """Turn `fn` (public, `llvm.emit_c_interface`, only memref arguments, no results) into
    `_mlir_ciface_<name>`: its memref arguments become pointers to their descriptors,
    loaded on entry (the upstream wrapper would pass every field to `<name>` instead)."""
    from mlir.dialects import llvm
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    if len(ftype.results) or not all(str(t).startswith("memref<") for t in ftype.inputs):
        return
    if "sym_visibility" in fn.attributes and ir.StringAttr(fn.attributes["sym_visibility"]).value != "public":
        return
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    module_block = fn.parent.regions[0].blocks[0]
    for call in walk_ops(fn.parent, lambda n: n == "func.call"):  # called from elsewhere: keep its convention
        if ir.FlatSymbolRefAttr(call.attributes["callee"]).value == name:
            return
    ptr_t = ir.Type.parse("!llvm.ptr")
    with ir.InsertionPoint(module_block):
        new = func.FuncOp(f"_mlir_ciface_{name}", ir.FunctionType.get([ptr_t] * len(ftype.inputs), []))
    new.operation.move_after(fn)
    entry = new.add_entry_block()
    old = fn.regions[0].blocks[0]
    with ir.InsertionPoint(entry):
        for a, p in zip(old.arguments, entry.arguments):
            t = ir.MemRefType(a.type)
            d = llvm.load(_descriptor_type(t.rank), p)
            a.replace_all_uses_with(_cast(d, t))
    last = list(entry.operations)[-1].operation
    for o in [o.operation for o in old.operations]:
        o.move_after(last)
        last = o
    fn.erase()


def outline_kernels(module, min_ops=MIN_OPS, c_interface=True):
    with module.context, ir.Location.unknown():
        funcs = [o.operation for o in module.regions[0].blocks[0].operations if o.operation.name == "func.func"]
        parts = {}
        for fn in funcs:
            if not fn.regions[0].blocks or 1 + count_ops(fn) < min_ops:
                continue
            body = [o.operation for o in fn.regions[0].blocks[0].operations]
            kernels = [op for op in body if _is_kernel(op)]
            if len(kernels) < 2:
                continue
            strip_locations(fn)  # (kernels from different places compare equal)
            base = ir.StringAttr(fn.attributes["sym_name"]).value
            after, pointers = fn, {}
            for i, op in enumerate(kernels):
                after = _outline(fn, op, f"{base}_part{i}", after, parts, pointers)
            if c_interface and CIFACE in fn.attributes:
                _c_interface_in_place(fn)


class MiraxOutlineKernels(MiraxPass):
    name = NAME
    summary = "Move each loop nest of a large function into a noinline private function, identical ones shared (LLVM time)"
    options = {"min-ops": (MIN_OPS, "functions with fewer nested ops stay whole"),
               "c-interface": (True, "a large function with a C interface becomes its _mlir_ciface_ wrapper")}

    def run(self, module):
        ci = self.opts["c-interface"]
        outline_kernels(module, int(self.opts["min-ops"]), ci if isinstance(ci, bool) else str(ci) != "false")
