"""Data-parallel training of the spiral MLP (examples/mlp_classifier.py) on N processes.

Every process builds the same model (same seed), takes its 1/N of each minibatch, and
averages the gradients with `nn.average_gradients` (all_sums over MPI) inside one
compiled step, so the parameters stay identical on every rank; rank 0 prints the loss
and test accuracy.

    mirax.launch -n 2 examples/distributed_mlp.py [--epochs 20] [--batch 128]
    .venv/bin/python examples/distributed_mlp.py            # one process: the same training
"""
import argparse
import time
from functools import partial

import numpy as np

import mirax as mr
import mirax.nn as nn
import mirax.optimizers as optim
from mlp_classifier import make_spirals


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=128, help="global minibatch, split between the processes")
    p.add_argument("--points", type=int, default=4000)
    p.add_argument("--hidden", type=int, default=64)
    args = p.parse_args(argv)

    world = mr.distributed.init()
    rank, size = world.rank(), world.size()
    if args.batch % size:
        raise SystemExit(f"--batch {args.batch} must be divisible by the {size} processes")
    x, y = make_spirals(args.points, 3, turns=2.0)
    cut = 3 * len(x) // 4
    xtr, ytr, xte, yte = x[:cut], y[:cut], x[cut:], y[cut:]
    mr.random.seed(0)
    model = nn.Sequential(nn.Linear(2, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.hidden), nn.GELU(),
                          nn.Linear(args.hidden, 3))
    opt = optim.Adam(learning_rate=5e-3)

    def loss_fn(m, x, y):
        return nn.losses.cross_entropy(m(x), y, reduction="mean")

    state = [model.state, opt.state]

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x, y):
        loss, grads = nn.value_and_grad(model, loss_fn)(model, x, y)
        grads = nn.average_gradients(grads)  # the mean over the processes: the whole batch's gradient
        opt.update(model, grads)
        return mr.distributed.all_sum(loss) / size

    local = args.batch // size
    steps = len(xtr) // args.batch
    rng = np.random.default_rng(1)  # the same order on every rank
    for epoch in range(args.epochs):
        order = rng.permutation(len(xtr))
        t0, total = time.perf_counter(), 0.0
        for s in range(steps):
            idx = order[s * args.batch + rank * local:s * args.batch + (rank + 1) * local]
            loss = step(mr.array(xtr[idx]), mr.array(ytr[idx]))
            mr.eval(state)
            total += loss.item()
        if rank == 0:
            acc = (np.asarray(mr.argmax(model(mr.array(xte)), axis=1)) == yte).mean()
            print(f"epoch {epoch + 1}: loss {total / steps:.4f}  test accuracy {acc:.3f}  "
                  f"{steps / (time.perf_counter() - t0):.0f} steps/s on {size} process(es)", flush=True)
    return model


if __name__ == "__main__":
    main()
