"""Run a function in a child forked from the test process (multiprocessing's default on
Linux) and return what it sends back; a child that hangs fails the test."""
import multiprocessing

import pytest


def run_forked(target, timeout=60):
    """`target(conn)` runs in a forked child and sends one value through `conn`."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=target, args=(child,))
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung")
    assert p.exitcode == 0
    return parent.recv()
