"""Skinny products as dot products along K: `x @ W.T` with a few vectors of columns.

A linalg.matmul whose C is a few vectors wide at most (a classifier head, 256x512 @
(10x512).T) tiles badly as matmul_codegen.py's register-blocked outer products: C's rows
pad to whole vectors (10 -> 16 columns), a one-vector tile needs a broadcast of A for
every multiply-add, so loads bound the loop, and W.T is repacked first. Read as dot
products, A's rows and W's rows (B = W.T, as `nn.Linear` stores it) are both contiguous
along K:

    scf.forall (row blocks)                       the threads (OpenMP, scheduled as products)
      scf.for m, step mr                          mr rows of A at a time (then one at a time)
        scf.for k, step lanes                     per nr-wide chunk of C's columns:
          a_i = A[m + i, k : k + lanes]           mr x nr vector accumulators
          w_j = W[n + j, k : k + lanes]
          acc_ij = fma(a_i, w_j, acc_ij)
        C[m + i, :] = the sums of acc_i*'s lanes    (`vector.reduction <add>`, reassociated;
                                                     a row of C written as one vector)

mr x nr accumulators and the mr + nr vectors loaded per step fill the host's vector
registers (lowering/host_cpu.py): 4 x 5 with 32 zmm and 10 columns, 3 x 3 with 16 ymm.
A B stored K x N (`x @ w`) is transposed first (small: N is a few vectors at most); a K
that is not a multiple of the lanes ends with one masked step; a C that does not start
from zeros (an accumulating product) is added to the sums.

    with ctx:
        module = ir.Module.parse(text)       # linalg on tensors
        dot_products(module)                 # before matmul_codegen's tiling of the rest

Measured on Emerald Rapids (AVX-512, two threads, one process, against the outer
products): 256x512 @ (10x512).T 30.0 -> 15.1 us (numpy 37-43), 64x784 @ (10x784).T 28.3 ->
9.5 us, 4096x4096 @ 4096 (a matrix-vector product, left to the generic lowering before)
8.5 -> 1.0 ms; under the AVX2 cap 256x512 @ (10x512).T 44.8 -> 18.6 us; the MLP step of
bench/train_step.py 0.5-0.7% faster (its logits product).
"""
from __future__ import annotations

from mlir import ir

from . import tuning
from .pass_base import defining_op, inline_body, walk_ops

# a product is read as dot products when C is at most this many vectors wide. Measured
# on Emerald Rapids, two threads, one process, against matmul_codegen's outer products:
# 256x512 @ (N x 512).T for N = 10, 20, 24, 33, 40: 2.3-2.9x faster, 1024x48x1024 1.8x,
# 512x64x512 and 1024x32x1024 even (both whole vectors); from 6 vectors the outer products
# win (512x96x512 0.96x, 512x128x512 0.92x); under the AVX2 cap N = 10, 16, 24, 32 1.2-2.4x
# (those before `qualifies` kept whole vectors the tiles do not pad on outer products).
# (The loops are unrolled over C's columns, so the code grows with N: 64 columns compile
# in ~0.6 s, 10 in 0.15 s.)
MAX_VECTORS = 4


def max_vectors() -> int:
    """`MAX_VECTORS`, or the tuning store's `matmul_dot.max_vectors` (part of the kernel
    cache's key: `tuning.override(matmul_dot={"max_vectors": 0})` turns the rewrite off)."""
    return int(tuning.measured().get("matmul_dot", {}).get("max_vectors", MAX_VECTORS))


def register_blocks(lanes: int, registers: int, n: int) -> tuple[int, int]:
    """(mr, nr) for an n-column product: mr x nr accumulators + mr + nr loaded vectors
    within `registers` - 1, fewest vector loads per multiply-add over all of C's columns
    (chunks of nr, the last one shorter), then the most accumulators (FMA latency).

    >>> register_blocks(16, 32, 10), register_blocks(8, 16, 10)
    ((4, 5), (3, 3))
    """
    best, key = (1, 1), None
    for mr in range(1, 9):
        for nr in range(1, n + 1):
            if mr * nr + mr + nr > registers - 1:
                continue
            chunks = [min(nr, n - c) for c in range(0, n, nr)]
            loads = sum(mr + c for c in chunks) / (mr * n)
            k = (round(loads, 6), -mr * nr)
            if key is None or k < key:
                best, key = (mr, nr), k
    return best


def _product(op):
    """(M, N, K, B stored N x K) of a static f32 2-d linalg.matmul this module rewrites,
    else None."""
    from .matmul_codegen import DEFAULT_MAPS, TRANSPOSED_B, _static_shape
    if op.name != "linalg.matmul" or len(op.operands) != 3 or len(op.results) != 1:
        return None
    shapes = [_static_shape(v) for v in op.operands]
    if any(s is None or s[1] != "f32" or len(s[0]) != 2 for s in shapes):
        return None
    maps = str(op.attributes["indexing_maps"]) if "indexing_maps" in op.attributes else DEFAULT_MAPS
    if maps not in (DEFAULT_MAPS, TRANSPOSED_B):
        return None
    (a, _), (b, _), _ = shapes
    transposed = maps == TRANSPOSED_B
    (M, K), N = a, (b[0] if transposed else b[1])
    return M, N, K, transposed


def qualifies(op, host=None) -> bool:
    """Whether `dot_products` rewrites linalg.matmul `op` on `host`: f32, static, B plain
    or transposed, at least the tuning table's `min_flops` (smaller ones stay with the
    generic lowering), C at most `max_vectors()` vectors wide and

    - one vector at most (as outer products each multiply-add needs a broadcast of its
      own), a part of a vector (tiles padded or half-vector tiles: 256x40x512 2.2x, 20, 24
      and 33 columns 2.5-2.9x faster as dot products), or whole vectors the outer products'
      register tile would pad (48 -> 64: 1024x48x1024 1.8x; 32 and 64 columns tile whole:
      even, measured);
    - K at least 4 vectors for each vector of columns: the lane sums, ~2 log2(lanes)
      operations an element of C, need that many multiply-adds to hide in (1536x64x64:
      104 us as dot products, 34 as outer products; 1536x10x64 19.7 vs 23.9 us)."""
    return _qualifying_product(op, host) is not None


def _qualifying_product(op, host=None):
    """`_product(op)` when `qualifies(op, host)`, else None."""
    from . import host_cpu
    from .matmul_codegen import plan
    got = _product(op)
    if got is None:
        return None
    M, N, K, _ = got
    h = host or host_cpu.host()
    lanes = h.f32_lanes
    vectors = -(-N // lanes)
    cfg = tuning.matmul_config("linalg.matmul_transpose_b", "f32", None, M, N, K) or {}
    if vectors > max_vectors() or K < 4 * lanes * vectors or 2 * M * N * K < cfg.get("min_flops", 0):
        return None
    if N <= lanes or N % lanes:
        return got
    # the outer products a compile would make on `host`: this process's measured or
    # derived tiles, or those derived for a preset host of another ISA family
    config = None if host is None else dict(tuning.derive(h)["matmul"][("linalg.matmul", "f32")])
    p = plan(op, config=config)
    return got if p is None or p["pad"][1] != N else None


def _tasks(M: int, mr: int, threads: int) -> tuple[int, int]:
    """(tasks, rows a task, a multiple of mr): `tasks_per_thread` tasks a thread when the
    rows allow, so the dynamic schedule evens out threads of unequal speed."""
    per = tuning.table()["matmul"][("linalg.matmul", "f32")].get("tasks_per_thread", 8)
    blocks = -(-M // mr)
    tasks = max(1, min(blocks, threads * per if threads > 1 else 1))
    rows = -(-blocks // tasks) * mr
    return -(-M // rows), rows


def dot_text(M: int, N: int, K: int, *, lanes: int, mr: int, nr: int, tasks: int, rows: int,
             accumulate: bool) -> str:
    """The function `@dot(A: MxK, W: NxK, C: MxN) -> MxN` computing C (+)= A @ W.T as above
    (`accumulate`: C's values are added, else C only gives the result's buffer)."""
    t = lambda *s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    vec = f"vector<{lanes}xf32>"
    kmain = K - K % lanes
    lines = [f"func.func @dot(%a: {t(M, K)}, %w: {t(N, K)}, %c: {t(M, N)}) -> {t(M, N)} {{",
             "  %i0 = arith.constant 0 : index", "  %i1 = arith.constant 1 : index",
             f"  %pad = arith.constant 0.0 : f32", f"  %zero = arith.constant dense<0.0> : {vec}",
             f"  %kmain = arith.constant {kmain} : index", f"  %klanes = arith.constant {lanes} : index",
             f"  %r = scf.forall (%t) in ({tasks}) shared_outs(%o = %c) -> ({t(M, N)}) {{",
             f"    %r0 = affine.apply affine_map<(t) -> (t * {rows})>(%t)",
             f"    %n = affine.min affine_map<(t) -> ({rows}, {M} - t * {rows})>(%t)",
             f"    %s = tensor.extract_slice %o[%r0, 0] [%n, {N}] [1, 1] : {t(M, N)} to tensor<?x{N}xf32>",
             f"    %full = affine.apply affine_map<(n) -> (n - n mod {mr})>(%n)"]
    uid = [0]

    def fresh(p):
        uid[0] += 1
        return f"%{p}{uid[0]}"

    def block(height, acc_in, row0, ind):
        """Ops for `height` rows of C from tensor row `row0` (an index value, relative to
        the task's slice) into `acc_in`; returns (lines, the updated tensor)."""
        out, acc, sums = [], acc_in, {}
        m = [fresh("m") for _ in range(height)]
        for i in range(height):  # the rows in A (the task's offset plus the slice's row)
            out.append(f"{ind}{m[i]} = affine.apply affine_map<(r, x) -> (r + x + {i})>(%r0, {row0})")
        for n0 in range(0, N, nr):
            cols = list(range(n0, min(N, n0 + nr)))
            accs = [(i, j) for i in range(height) for j in cols]
            names = {ij: fresh("x") for ij in accs}
            res = fresh("v")

            def step(k, masked, src):
                body = []
                av = {}
                for i in range(height):
                    av[i] = fresh("a")
                    body.append(f"{ind}  {av[i]} = vector.transfer_read %a[{m[i]}, {k}], %pad "
                                f"{{in_bounds = [{'false' if masked else 'true'}]}} : {t(M, K)}, {vec}")
                wv = {}
                for j in cols:
                    wv[j], row = fresh("wv"), fresh("wrow")
                    body.append(f"{ind}  {row} = arith.constant {j} : index")
                    body.append(f"{ind}  {wv[j]} = vector.transfer_read %w[{row}, {k}], %pad "
                                f"{{in_bounds = [{'false' if masked else 'true'}]}} : {t(N, K)}, {vec}")
                outs = {}
                for ij in accs:
                    outs[ij] = fresh("y")
                    body.append(f"{ind}  {outs[ij]} = vector.fma {av[ij[0]]}, {wv[ij[1]]}, {src[ij]} : {vec}")
                return body, outs

            if kmain:
                k = fresh("k")
                iter_args = ", ".join(f"{names[ij]} = %zero" for ij in accs)
                out.append(f"{ind}{res}:{len(accs)} = scf.for {k} = %i0 to %kmain step %klanes "
                           f"iter_args({iter_args}) -> ({', '.join([vec] * len(accs))}) {{")
                body, outs = step(k, False, names)
                out += body
                out.append(f"{ind}  scf.yield {', '.join(outs[ij] for ij in accs)} : {', '.join([vec] * len(accs))}")
                out.append(f"{ind}}}")
                cur = {ij: f"{res}#{n}" for n, ij in enumerate(accs)}
            else:
                cur = {ij: "%zero" for ij in accs}
            if K % lanes:  # (one masked step: the padding reads as zeros)
                body, cur = step("%kmain", True, cur)
                out += body
            for ij in accs:
                sums[ij] = fresh("sum")
                out.append(f"{ind}{sums[ij]} = vector.reduction <add>, {cur[ij]} fastmath<reassoc> : {vec} "
                           "into f32")
        # each row of C's block written as one vector (not element by element: a chain of
        # mr x N tensor.inserts made bufferization's analysis quadratic in N)
        row_t = f"vector<{N}xf32>"
        for i in range(height):
            ri, v = fresh("ri"), fresh("row")
            out.append(f"{ind}{ri} = affine.apply affine_map<(x) -> (x + {i})>({row0})")
            out.append(f"{ind}{v} = vector.from_elements {', '.join(sums[(i, j)] for j in range(N))} : {row_t}")
            if accumulate:
                old, tot = fresh("old"), fresh("tot")
                out.append(f"{ind}{old} = vector.transfer_read {acc}[{ri}, %i0], %pad {{in_bounds = [true]}} : "
                           f"tensor<?x{N}xf32>, {row_t}")
                out.append(f"{ind}{tot} = arith.addf {old}, {v} : {row_t}")
                v = tot
            nxt = fresh("c")
            out.append(f"{ind}{nxt} = vector.transfer_write {v}, {acc}[{ri}, %i0] {{in_bounds = [true]}} : "
                       f"{row_t}, tensor<?x{N}xf32>")
            acc = nxt
        return out, acc

    # the rows in blocks of mr, then the rest one at a time
    ind = "      "
    body, acc = block(mr, "%acc", "%i", ind)
    lines += [f"    %cmr = arith.constant {mr} : index",
              f"    %s1 = scf.for %i = %i0 to %full step %cmr iter_args(%acc = %s) -> (tensor<?x{N}xf32>) {{"]
    lines += body + [f"      scf.yield {acc} : tensor<?x{N}xf32>", "    }"]
    if mr > 1:
        body, acc = block(1, "%acc1", "%i1r", ind)
        lines += [f"    %s2 = scf.for %i1r = %full to %n step %i1 iter_args(%acc1 = %s1) -> (tensor<?x{N}xf32>) {{"]
        lines += body + [f"      scf.yield {acc} : tensor<?x{N}xf32>", "    }"]
        last = "%s2"
    else:
        last = "%s1"
    lines += ["    scf.forall.in_parallel {",
              f"      tensor.parallel_insert_slice {last} into %o[%r0, 0] [%n, {N}] [1, 1] : tensor<?x{N}xf32> into {t(M, N)}",
              "    }", "  }", f"  return %r : {t(M, N)}", "}"]
    return "\n".join(lines)


def dot_products(module, host=None) -> int:
    """Rewrite each qualifying linalg.matmul of `module` (on tensors, in place) into the
    dot-product loops above; returns how many. Its `vector.fma`s carry matmul_codegen's
    task size (`openmp_dynamic_schedule` schedules the row blocks dynamically)."""
    from mlir.dialects import linalg, tensor
    from . import host_cpu
    from .matmul_codegen import TASK_MACS, _zero_filled
    root = module.operation if hasattr(module, "operation") else module
    h = host or host_cpu.host()
    done = 0
    with root.context:
        for op in walk_ops(root, lambda n: n == "linalg.matmul"):
            got = _qualifying_product(op, host)  # (None: this process, its measured tiles)
            if got is None:
                continue
            M, N, K, transposed = got
            lanes = h.f32_lanes
            mr, nr = register_blocks(lanes, h.vector_registers, N)
            threads = tuning.threads()
            tasks, rows = _tasks(M, mr, threads)
            init = op.operands[2]
            accumulate = not _zero_filled(init)
            text = dot_text(M, N, K, lanes=lanes, mr=mr, nr=nr, tasks=tasks, rows=rows, accumulate=accumulate)
            parsed = ir.Module.parse(text)  # (held: the function lives in it until inlined)
            f = parsed.body.operations[0]
            with ir.InsertionPoint(op), op.location:
                a, w = op.operands[0], op.operands[1]
                if not transposed:  # (K x N, N a few vectors at most: a small copy)
                    e = tensor.EmptyOp([N, K], ir.F32Type.get()).result
                    w = linalg.transpose(w, outs=[e], permutation=[1, 0]).results[0]
                c = init if accumulate else defining_op(init).operands[1]
            macs = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), rows * N * K)
            for fma in walk_ops(f, lambda n: n == "vector.fma"):
                fma.attributes[TASK_MACS] = macs
            block = f.regions[0].blocks[0]
            inline_body(block, [a, w, c], op, list(op.results))
            op.erase()
            done += 1
    return done
