"""The linear model of the compile guide ("Compiling Training Graphs"), with `mr` for `mx`.

A one-output `nn.Linear(10, 1)` fit with binary cross entropy and SGD with momentum on 4
random examples, first step by step without compilation, then with the whole forward,
backward and update compiled by `mr.compile(step, inputs=state, outputs=state)` where
`state = [model.state, optimizer.state]`. Both runs start from the same seed, so they
must produce the same loss at every step; `main` prints both sequences and exits non-zero
(raises) if they differ by more than float32 round-off.

    .venv/bin/python examples/linear_model.py [--steps 10] [--seed 0]
"""
import argparse
import time
from functools import partial

import numpy as np

import mirax as mr
import mirax.nn as nn
import mirax.optimizers as optim


def run_uncompiled(steps):
    # 4 examples with 10 features each
    x = mr.random.uniform(shape=(4, 10))

    # 0, 1 targets
    y = mr.array([0, 1, 0, 1])

    # Simple linear model
    model = nn.Linear(10, 1)

    # SGD with momentum
    optimizer = optim.SGD(learning_rate=0.1, momentum=0.8)

    def loss_fn(model, x, y):
        logits = model(x).squeeze()
        return nn.losses.binary_cross_entropy(logits, y)

    loss_and_grad_fn = nn.value_and_grad(model, loss_fn)

    losses = []
    # Perform 10 steps of gradient descent
    for it in range(steps):
        loss, grads = loss_and_grad_fn(model, x, y)
        optimizer.update(model, grads)
        mr.eval(model.parameters(), optimizer.state)
        losses.append(loss.item())
    return losses


def run_compiled(steps):
    # 4 examples with 10 features each
    x = mr.random.uniform(shape=(4, 10))

    # 0, 1 targets
    y = mr.array([0, 1, 0, 1])

    # Simple linear model
    model = nn.Linear(10, 1)

    # SGD with momentum
    optimizer = optim.SGD(learning_rate=0.1, momentum=0.8)

    def loss_fn(model, x, y):
        logits = model(x).squeeze()
        return nn.losses.binary_cross_entropy(logits, y)

    # The state that will be captured as input and output
    state = [model.state, optimizer.state]

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x, y):
        loss_and_grad_fn = nn.value_and_grad(model, loss_fn)
        loss, grads = loss_and_grad_fn(model, x, y)
        optimizer.update(model, grads)
        return loss

    losses = []
    # Perform 10 steps of gradient descent
    for it in range(steps):
        loss = step(x, y)
        # Evaluate the model and optimizer state
        mr.eval(state)
        losses.append(loss.item())
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="gradient-descent steps (the guide's 10)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    mr.random.seed(args.seed)
    t0 = time.perf_counter()
    plain = run_uncompiled(args.steps)
    t1 = time.perf_counter()
    mr.random.seed(args.seed)  # the same data and initial weights
    compiled = run_compiled(args.steps)
    t2 = time.perf_counter()

    print(f"{'step':>4} {'uncompiled':>12} {'compiled':>12}")
    for i, (a, b) in enumerate(zip(plain, compiled)):
        print(f"{i:4d} {a:12.6f} {b:12.6f}")
    print(f"uncompiled: {t1 - t0:.2f} s, compiled (including tracing and JIT): {t2 - t1:.2f} s")
    np.testing.assert_allclose(compiled, plain, rtol=1e-5, atol=1e-6,
                               err_msg="compiled and uncompiled losses differ")
    if args.steps > 1 and not plain[-1] < plain[0]:
        raise SystemExit(f"the loss did not decrease: {plain[0]:.4f} -> {plain[-1]:.4f}")
    print("the compiled and uncompiled losses match at every step")
    return {"uncompiled": plain, "compiled": compiled}


if __name__ == "__main__":
    main()
