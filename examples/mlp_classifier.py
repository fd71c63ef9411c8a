"""An MLP classifier on generated 2-D spirals, trained with a compiled step.

The data are `--classes` interleaved noisy spiral arms in the plane (generated here with a
seeded numpy generator; nothing is downloaded), split into train and test sets. The model
is `nn.Sequential(Linear, GELU, Dropout, Linear, GELU, Dropout, Linear)`; training uses
minibatches and Adam, and the whole forward, backward and update is one function compiled
by `mr.compile` with `state = [model.state, optimizer.state, mr.random.state]` captured as
input and output (the Dropout masks are drawn from `mr.random.state`, so the compiled step
advances the global key exactly as the uncompiled one would). Each epoch prints the mean
training loss, the train and test accuracy (model in eval mode, no dropout) and steps/s.

At the default size (3 arms of 2 turns, 4000 points, 3/4 for training, 3 hidden layers of
64, 40 epochs of batch 100 = 1200 steps, Adam at 5e-3 decayed along `optim.cosine_decay`,
seed 0) it reaches at least 95% test accuracy (measured: 100.0% at seeds 0-3, in ~3 s
after compilation); `main` exits non-zero (SystemExit) if the final test accuracy is below
`--threshold` (0.95 by default).

    .venv/bin/python examples/mlp_classifier.py [--points 4000] [--epochs 40] [--hidden 64]
"""
import argparse
import math
import time
from functools import partial

import numpy as np

import mirax as mr
import mirax.nn as nn
import mirax.optimizers as optim


def make_spirals(n_points, n_classes, noise=0.2, turns=1.5, seed=0):
    """(x (n, 2) float32, y (n,) int32): n_points spread over n_classes spiral arms."""
    rng = np.random.default_rng(seed)
    y = np.arange(n_points) % n_classes
    r = rng.uniform(0.05, 1.0, n_points)                      # radius along the arm
    theta = 2 * math.pi * (turns * r + y / n_classes)          # arm k is rotated by 2 pi k / K
    theta = theta + rng.normal(0.0, noise, n_points) * r       # angular noise, larger outside
    x = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1) * 2.0
    perm = rng.permutation(n_points)
    return x[perm].astype(np.float32), y[perm].astype(np.int32)


class MLP(nn.Module):
    def __init__(self, in_dims, hidden, n_layers, out_dims, dropout):
        super().__init__()
        layers = []
        dims = in_dims
        for _ in range(n_layers):
            layers += [nn.Linear(dims, hidden), nn.GELU(), nn.Dropout(dropout)]
            dims = hidden
        layers.append(nn.Linear(dims, out_dims))
        self.layers = nn.Sequential(*layers)

    def __call__(self, x):
        return self.layers(x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=4000, help="total number of points")
    p.add_argument("--classes", type=int, default=3, help="number of spiral arms")
    p.add_argument("--turns", type=float, default=2.0, help="turns of each arm")
    p.add_argument("--noise", type=float, default=0.2, help="angular noise (radians at the rim)")
    p.add_argument("--test-fraction", type=float, default=0.25)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=3, help="hidden layers")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--lr", type=float, default=5e-3, help="initial Adam learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=0.95, help="required final test accuracy")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    args = p.parse_args(argv)

    mr.random.seed(args.seed)
    x, y = make_spirals(args.points, args.classes, noise=args.noise, turns=args.turns, seed=args.seed)
    n_test = int(round(args.points * args.test_fraction))
    x_train, y_train = mr.array(x[n_test:]), mr.array(y[n_test:])
    x_test, y_test = mr.array(x[:n_test]), mr.array(y[:n_test])
    n_train = x_train.shape[0]
    if n_train < args.batch:
        raise SystemExit(f"--batch {args.batch} is larger than the training set ({n_train})")

    model = MLP(2, args.hidden, args.layers, args.classes, args.dropout)
    steps_per_epoch = n_train // args.batch  # the remainder is dropped: every step has one shape
    total_steps = args.epochs * steps_per_epoch
    # Adam with the learning rate decayed along a cosine to lr/100 over the whole run
    optimizer = optim.Adam(learning_rate=optim.cosine_decay(args.lr, total_steps, args.lr / 100))

    def loss_fn(model, x, y):
        return nn.losses.cross_entropy(model(x), y, reduction="mean")

    # create the optimizer's state now (the first update would): then the state captured
    # below has its final structure and the step is traced and compiled only once
    optimizer.init(model.trainable_parameters())
    # Dropout draws from mr.random.state: capture it too so that every step gets new masks
    state = [model.state, optimizer.state, mr.random.state]

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x, y):
        loss, grads = nn.value_and_grad(model, loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    @partial(mr.compile, inputs=model.state)
    def predict(x):
        return mr.argmax(model(x), axis=-1)

    def accuracy(x, y):
        model.eval()
        acc = (predict(x) == y).astype(mr.float32).mean().item()
        model.train()
        return acc

    rng = np.random.default_rng(args.seed + 1)
    if not args.quiet:
        print(f"spirals: {args.classes} classes, {n_train} train / {n_test} test points; "
              f"MLP 2-{'-'.join([str(args.hidden)] * args.layers)}-{args.classes}, "
              f"{steps_per_epoch} steps/epoch")
    model.train()
    t_start = time.perf_counter()
    history = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        order = mr.array(rng.permutation(n_train).astype(np.int32))
        losses = []
        for i in range(steps_per_epoch):
            idx = order[i * args.batch:(i + 1) * args.batch]
            loss = step(x_train[idx], y_train[idx])
            mr.eval(state, loss)
            losses.append(loss)
        train_loss = float(np.mean([l.item() for l in losses]))
        t1 = time.perf_counter()
        train_acc, test_acc = accuracy(x_train, y_train), accuracy(x_test, y_test)
        history.append((train_loss, train_acc, test_acc))
        if not args.quiet:
            print(f"epoch {epoch + 1:3d}: loss {train_loss:.4f}, train acc {train_acc:.3f}, "
                  f"test acc {test_acc:.3f}, {steps_per_epoch / (t1 - t0):.1f} steps/s")
    elapsed = time.perf_counter() - t_start
    train_loss, train_acc, test_acc = history[-1]
    print(f"final: loss {train_loss:.4f}, train acc {train_acc:.3f}, test acc {test_acc:.3f} "
          f"({args.epochs * steps_per_epoch} steps in {elapsed:.1f} s; step traced {step.trace_count}x)")
    result = {"loss": train_loss, "train_acc": train_acc, "test_acc": test_acc, "history": history,
              "seconds": elapsed}
    if test_acc < args.threshold:
        raise SystemExit(f"test accuracy {test_acc:.3f} is below the threshold {args.threshold}")
    return result


if __name__ == "__main__":
    main()
