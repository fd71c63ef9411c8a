"""What each process of test_distributed.py runs (under mirax.launch -n N): every check
against numpy; prints `rank R of N: ok` at the end. `python distributed_worker.py MODE`
runs one of the fault modes instead."""
import os
import sys
import time

import numpy as np

import mirax as mr
import mirax.nn as nn
import mirax.optimizers as optim

D = mr.distributed


def close(got, want, what, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol, err_msg=what)


def collectives(g, r, n):
    # every rank's operand is known to every rank: numpy computes the expected results
    xs = [np.arange(6, dtype=np.float32).reshape(2, 3) * (k + 1) - k for k in range(n)]
    x = mr.array(xs[r])
    close(D.all_sum(x), sum(xs), "all_sum")
    close(D.all_max(x), np.max(xs, axis=0), "all_max")
    close(D.all_min(x), np.min(xs, axis=0), "all_min")
    close(D.all_gather(x), np.concatenate(xs), "all_gather")
    close(D.all_gather(mr.array(float(r))), np.arange(n, dtype=np.float32), "all_gather of 0-d")
    big = [np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2) + 10 * k for k in range(n)]
    close(D.sum_scatter(mr.array(big[r])), sum(big)[2 * r:2 * r + 2], "sum_scatter")
    ints = mr.array(np.array([r, -r, 7], np.int32))
    got = D.all_sum(ints)
    assert got.dtype == mr.int32 and np.array_equal(np.asarray(got), [n * (n - 1) // 2, -n * (n - 1) // 2, 7 * n])
    half = D.all_sum(mr.array(np.float32(r + 0.5)).astype(mr.bfloat16))
    assert half.dtype == mr.bfloat16 and float(half.astype(mr.float32)) == n * n / 2
    # point to point: a ring
    nxt, prv = (r + 1) % n, (r - 1) % n
    if r % 2 == 0:
        mr.eval(D.send(x, nxt))
        got = D.recv_like(x, prv)
    else:
        got = D.recv(x.shape, x.dtype, prv)
        mr.eval(got)
        mr.eval(D.send(x, nxt))
    close(got, xs[prv], "send/recv")
    # split: even and odd ranks
    sub = g.split(r % 2)
    members = [k for k in range(n) if k % 2 == r % 2]
    assert sub.size() == len(members) and sub.rank() == members.index(r)
    close(D.all_sum(x, group=sub), sum(xs[k] for k in members), "all_sum over a split group")
    # mismatched operands name the collective
    try:
        mr.eval(D.all_sum(mr.ones((r + 1,))))
        raise AssertionError("mismatched shapes were accepted")
    except D.DistributedError as err:
        assert "all_sum" in str(err) and "float32[1]" in str(err) and "float32[2]" in str(err), err
    return xs


def transforms(r, n, xs):
    x = mr.array(xs[r])
    total = sum(xs)
    f = mr.compile(lambda a: D.all_sum(mr.exp(a) * 2) + D.all_gather(a)[:2])
    close(f(x), 2 * sum(np.exp(v) for v in xs) + xs[0], "compiled collectives", 1e-4)
    # grad through all_sum: the loss after it is the same on every rank
    g = mr.grad(lambda a: (D.all_sum(a) ** 2).sum())(x)
    close(g, 2 * total, "grad of all_sum")
    g = mr.grad(lambda a: (D.all_gather(a) * np.arange(2 * n * 3).reshape(2 * n, 3)).sum())(x)
    close(g, np.arange(2 * n * 3).reshape(2 * n, 3)[2 * r:2 * r + 2], "grad of all_gather")
    g = mr.grad(lambda a: D.all_max(a).sum())(x)
    close(g, (xs[r] == np.max(xs, axis=0)) / (np.stack(xs) == np.max(xs, axis=0)).sum(0), "grad of all_max")
    # compiled grad, and vmap over a batch axis that is not 0
    cg = mr.compile(mr.grad(lambda a: (D.sum_scatter(mr.concatenate([a] * n)) ** 2).sum()))
    close(cg(x), 2 * n * total, "compiled grad of sum_scatter")
    b = mr.stack([x, x * 2], axis=1)  # (2, 2, 3): batch axis 1
    close(mr.vmap(D.all_gather, in_axes=1)(b), np.stack([np.concatenate(xs), 2 * np.concatenate(xs)]),
          "vmap of all_gather")
    tan = mr.jvp(lambda a: D.all_sum(a * a), [x], [mr.ones_like(x)])[1][0]
    close(tan, 2 * total, "jvp of all_sum")


def training(r, n):
    """Data parallel on the ranks vs one process on the whole batch: same parameters."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8 * n, 4)).astype(np.float32)
    Y = rng.integers(0, 3, size=8 * n)

    def fit(xb, yb, parallel):
        mr.random.seed(1)
        model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = optim.SGD(learning_rate=0.5)

        def loss(m, a, y):
            return nn.losses.cross_entropy(m(a), y, reduction="mean")
        step = nn.value_and_grad(model, loss)
        for _ in range(5):
            _, grads = step(model, mr.array(xb), mr.array(yb))
            if parallel:
                grads = nn.average_gradients(grads, all_reduce_size=256)  # several buckets
            opt.update(model, grads)
            mr.eval(model.parameters())
        return np.concatenate([np.asarray(v).ravel() for _, v in mr.utils.tree_flatten(model.parameters())])

    mine = fit(X[8 * r:8 * r + 8], Y[8 * r:8 * r + 8], True)
    whole = fit(X, Y, False)
    close(mine, whole, "data-parallel training vs the whole batch", 1e-4)
    everyone = np.asarray(D.all_gather(mr.array(mine[None])))
    assert (everyone == everyone[0]).all(), "parameters differ between ranks"


def tensor_parallel(r, n):
    mr.random.seed(2)
    fc1, fc2 = nn.Linear(6, 4 * n), nn.Linear(4 * n, 5)
    x = mr.random.normal((3, 6))
    a, b = nn.AllToShardedLinear.from_linear(fc1), nn.ShardedToAllLinear.from_linear(fc2)
    close(b(nn.relu(a(x))), np.asarray(fc2(nn.relu(fc1(x)))), "sharded MLP", 1e-4)
    full = mr.grad(lambda v: (fc2(nn.relu(fc1(v))) ** 2).sum())(x)
    close(mr.grad(lambda v: (b(nn.relu(a(v))) ** 2).sum())(x), np.asarray(full), "sharded MLP gradient", 1e-4)


def sharded(r, n):
    """mr.compile(in_shardings=, out_shardings=): partitioned by MLIR's shard passes, the
    collectives inside the compiled code; each rank passes and gets its blocks."""
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=(4 * n, 6)).astype(np.float32), rng.normal(size=(6, 2 * n)).astype(np.float32)
    rows, cols = slice(4 * r, 4 * r + 4), slice(2 * r, 2 * r + 2)
    f = mr.compile(lambda a, b: a @ b, in_shardings=(0, None), out_shardings=None)  # all_gather
    close(f(mr.array(A[rows]), mr.array(B)), A @ B, "row-sharded matmul")
    f = mr.compile(lambda a, b: a @ b, in_shardings=(None, 1), out_shardings=1)  # no communication
    close(f(mr.array(A), mr.array(B[:, cols])), (A @ B)[:, cols], "column-sharded matmul")
    f = mr.compile(lambda a, b: a @ b, in_shardings=(1, 0), out_shardings=None)  # partial sums: all_reduce
    close(f(mr.array(B[:, cols]), mr.array(B.T[cols])), B @ B.T, "contraction-sharded matmul", 1e-4)
    loss = mr.compile(lambda x, w: (mr.tanh(x @ w) ** 2).mean(), in_shardings=(0, None), out_shardings=None)
    close(loss(mr.array(A[rows]), mr.array(B)), (np.tanh(A @ B) ** 2).mean(), "data-parallel loss")
    w, b = mr.array(B), mr.array(np.arange(2 * n, dtype=np.float32))  # captured: replicated arguments
    loss = mr.compile(lambda x: mr.maximum(x @ w + b, 0).sum(axis=0), in_shardings=0, out_shardings=None)
    close(loss(mr.array(A[rows])), np.maximum(A @ B + np.arange(2 * n), 0).sum(0), "captured weights", 1e-4)
    f = mr.compile(lambda a: a * 2, in_shardings=0, out_shardings=1)  # all_to_all
    S = rng.normal(size=(2 * n, 2 * n)).astype(np.float32)
    close(f(mr.array(S[2 * r:2 * r + 2])), (S * 2)[:, cols], "rows in, columns out")


def gpu(r, n):
    """Collectives on GPU arrays: read to host memory, exchanged, uploaded."""
    with mr.stream(mr.gpu):
        x = mr.array(np.arange(4, dtype=np.float32) + r)
        y, z = D.all_sum(x * 2), D.all_gather(x)
        assert y.device == mr.gpu
        close(y, 2 * sum(np.arange(4) + k for k in range(n)), "all_sum on the GPU")
        close(z, np.concatenate([np.arange(4) + k for k in range(n)]), "all_gather on the GPU")


def faults(mode, r):
    if mode == "raise" and r == 1:
        raise ValueError("boom on rank 1")
    if mode == "kill" and r == 1:
        os.kill(os.getpid(), 9)
    if mode == "hang" and r == 1:
        time.sleep(120)
    mr.eval(D.all_sum(mr.ones(3)))
    print(f"rank {r}: finished", flush=True)


def main():
    g = D.init(strict=True)
    r, n = g.rank(), g.size()
    assert n == int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if len(sys.argv) > 1:
        return faults(sys.argv[1], r)
    parts = os.environ.get("WORKER_PARTS", "collectives,transforms,training,tensor_parallel,sharded").split(",")
    xs = collectives(g, r, n)
    for name in parts[1:]:
        t = time.perf_counter()
        {"transforms": lambda: transforms(r, n, xs), "training": lambda: training(r, n),
         "tensor_parallel": lambda: tensor_parallel(r, n), "sharded": lambda: sharded(r, n),
         "gpu": lambda: gpu(r, n)}[name]()
        if os.environ.get("WORKER_TIMES"):
            print(f"rank {r}: {name} {time.perf_counter() - t:.1f} s", flush=True)
    print(f"rank {r} of {n}: ok", flush=True)


main()
