"""mirax.distributed against mpi4py: all_sum bandwidth over a few sizes next to
mpi4py's own Allreduce on the same buffers (overhead ratio) and the same all-reduce
inside a function compiled with in_shardings= (MLIR's shard and mpi dialects), then the
data-parallel MLP step time on 1 and 2 processes.

    .venv/bin/python bench/distributed.py [--nproc 2]
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _host  # noqa: E402,F401  (the peers' environment, before numpy and jax load: _host.cap_peers)

import numpy as np  # noqa: E402

SIZES = [1 << 10, 1 << 16, 1 << 20, 1 << 22]  # float32 elements


def best(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def allreduce_worker():
    from mpi4py import MPI

    import mirax as mr
    world = mr.distributed.init()
    comm = MPI.COMM_WORLD
    for n in SIZES:
        x = np.random.default_rng(0).normal(size=n).astype(np.float32)
        out = np.empty_like(x)
        reps = 20 if n <= 1 << 20 else 5
        t_mpi = best(lambda: comm.Allreduce(x, out, MPI.SUM), reps)
        xa = mr.array(x)
        t_mr = best(lambda: mr.eval(mr.distributed.all_sum(xa)), reps)
        # the same all-reduce planned by MLIR's shard passes, called from compiled code
        # (mpi dialect -> MPI_Allreduce): a sum over the axis split between the processes
        sharded = mr.compile(lambda v: v.sum(axis=0), in_shardings=0, out_shardings=None)
        row = mr.array(x[None])
        t_sh = best(lambda: mr.eval(sharded(row)), reps)
        if world.rank() == 0:
            gb = x.nbytes / 1e9
            print(f"all_sum {x.nbytes / 1024:>8.0f} KiB   mirax {gb / t_mr:6.2f} GB/s {t_mr * 1e6:8.0f} us   "
                  f"mpi4py {gb / t_mpi:6.2f} GB/s {t_mpi * 1e6:8.0f} us   overhead x{t_mr / t_mpi:.2f}   "
                  f"sharded compile {t_sh * 1e6:8.0f} us x{t_sh / t_mpi:.2f}", flush=True)


def step_worker():
    import mirax as mr
    import mirax.nn as nn
    import mirax.optimizers as optim
    world = mr.distributed.init()
    n = world.size()
    mr.random.seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = optim.SGD(learning_rate=0.01)
    state = [model.state, opt.state]

    def loss_fn(m, x, y):
        return nn.losses.cross_entropy(m(x), y, reduction="mean")

    def train_step(x, y):
        loss, grads = nn.value_and_grad(model, loss_fn)(model, x, y)
        opt.update(model, nn.average_gradients(grads))
        return loss
    step = mr.compile(train_step, inputs=state, outputs=state)
    batch = 512
    rng = np.random.default_rng(world.rank())
    x = mr.array(rng.normal(size=(batch // n, 256)).astype(np.float32))
    y = mr.array(rng.integers(0, 10, batch // n).astype(np.int32))
    t = best(lambda: mr.eval(step(x, y), state), 10)
    if world.rank() == 0:
        print(f"data-parallel step (global batch {batch}): {t * 1e3:7.2f} ms on {n} process(es)", flush=True)


def launch(n, what):
    cmd = [sys.executable, "-m", "mirax.launch", "-n", str(n), __file__, "--worker", what]
    subprocess.run(cmd, check=True, env=dict(os.environ))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--worker", choices=["allreduce", "step"])
    args = p.parse_args()
    if args.worker == "allreduce":
        return allreduce_worker()
    if args.worker == "step":
        return step_worker()
    from _host import describe
    print(describe(), flush=True)
    launch(args.nproc, "allreduce")
    launch(1, "step")
    launch(args.nproc, "step")


if __name__ == "__main__":
    main()
