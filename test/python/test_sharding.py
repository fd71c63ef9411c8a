"""mr.compile(in_shardings=, out_shardings=) in one process: the stages MLIR's shard
passes produce for grids of 2 and 4 processes, the calls of a job of one process, and
the errors. test_distributed.py runs the programs on 2 and 4 processes."""
import numpy as np
import pytest

import mirax as mr
from mirax.dialect.core import MiraxError
from mirax.lowering.shard import local_shape, parse_shardings


def matmul(a, b):
    return a @ b


def loss(x, w):
    return (mr.tanh(x @ w) ** 2).mean()


def test_row_sharded_matmul_is_partitioned_into_blocks_and_an_all_gather():
    f = mr.compile(matmul, in_shardings=(0, None), out_shardings=None)
    low = f.lower(mr.ones((4, 6)), mr.ones((6, 5)), grid=2)  # this rank's 4 of the 8 rows
    assert "tensor<8x6xf32>" in low.as_text("linalg")  # traced at the whole shapes
    sharded = low.as_text("sharded")
    assert "shard.grid @mesh(shape = 2)" in sharded
    assert "func.func @main(%arg0: tensor<4x6xf32>, %arg1: tensor<6x5xf32>) -> tensor<8x5xf32>" in sharded
    assert "linalg.matmul ins(%arg0, %arg1 : tensor<4x6xf32>, tensor<6x5xf32>)" in sharded
    assert "shard.all_gather" in sharded and "gather_axis = 0 : tensor<4x5xf32> -> tensor<8x5xf32>" in sharded
    mpi = low.as_text("mpi")  # the gather as a sum of blocks placed at each rank's offset
    assert "mpi.allreduce" in mpi and "tensor.insert_slice" in mpi and "mpi.comm_rank" in mpi
    assert "shard.all_" not in mpi and "mpi.comm_split" not in mpi


def test_data_parallel_loss_reduces_locally_then_all_reduces():
    f = mr.compile(loss, in_shardings=(0, None), out_shardings=None)
    low = f.lower(mr.ones((2, 6)), mr.ones((6, 5)), grid=4)
    sharded = low.as_text("sharded")
    assert "%arg0: tensor<2x6xf32>" in sharded and "tensor<8x5xf32>" not in sharded
    assert sharded.count("shard.all_reduce") == 1 and "shard.all_gather" not in sharded
    llvm = low.as_text("llvm")
    assert "llvm.call @MPI_Allreduce" in llvm and "@ompi_mpi_op_sum" in llvm
    assert "@ompi_mpi_sum" not in llvm and "MPI_Comm_split" not in llvm  # lowering/shard.py's fixes
    assert "shard." not in llvm and "mpi." not in llvm.replace("@ompi_mpi", "").replace("@MPI_", "")


def test_captured_arrays_become_replicated_arguments():
    w, b = mr.array(np.ones((6, 4), np.float32)), mr.array(np.arange(4, dtype=np.float32))
    f = mr.compile(lambda x: mr.maximum(x @ w + b, 0).sum(axis=0), in_shardings=0, out_shardings=None)
    sharded = f.lower(mr.ones((2, 6)), grid=2).as_text("sharded")
    signature = next(line for line in sharded.splitlines() if "func.func @main" in line)
    assert "(%arg0: tensor<2x6xf32>, %arg1: " in signature and signature.count("%arg") == 3
    assert "tensor<6x4xf32>" in signature and "tensor<4xf32>, %arg" in signature
    assert sharded.count("shard.all_reduce") == 1 and "shard.all_gather" not in sharded


def test_column_sharded_result_needs_no_communication():
    f = mr.compile(matmul, in_shardings=(None, 1), out_shardings=1)
    sharded = f.lower(mr.ones((3, 6)), mr.ones((6, 2)), grid=2).as_text("sharded")
    assert "-> tensor<3x2xf32>" in sharded and "shard.all_" not in sharded


def test_one_process_runs_the_whole_function():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    f = mr.compile(matmul, in_shardings=(0, None), out_shardings=None)
    np.testing.assert_allclose(np.asarray(f(mr.array(a), mr.array(b))), a @ b, rtol=1e-5, atol=1e-5)
    g = mr.compile(loss, in_shardings=0, out_shardings=None)
    np.testing.assert_allclose(float(g(a, b)), (np.tanh(a @ b) ** 2).mean(), rtol=1e-5)


def test_sharding_errors():
    x, w = mr.ones((4, 6)), mr.ones((6, 5))
    with pytest.raises(ValueError, match="in_shardings has 1 entries for 2 arguments"):
        mr.compile(matmul, in_shardings=[0], out_shardings=None).lower(x, w, grid=2)
    with pytest.raises(ValueError, match="argument 0 has 2 axes"):
        mr.compile(matmul, in_shardings=(2, None)).lower(x, w, grid=2)
    with pytest.raises(TypeError, match="an axis"):
        mr.compile(matmul, in_shardings=("rows", None)).lower(x, w, grid=2)
    with pytest.raises(ValueError, match="cannot split result 0 of shape \\[8, 5\\] over 2"):
        mr.compile(matmul, in_shardings=(0, None), out_shardings=1).lower(x, w, grid=2)
    with pytest.raises(ValueError, match="cannot be combined"):
        mr.compile(matmul, shapeless=True, in_shardings=0)
    with pytest.raises(ValueError, match="no stage 'ptx'"):
        mr.compile(matmul, in_shardings=(0, None)).lower(x, w, grid=2).as_text("ptx")
    with pytest.raises(TypeError, match="must be an array"):
        mr.compile(matmul, in_shardings=(0, None))(x, [1.0])


def test_shard_pass_helpers():
    assert parse_shardings("0,-,1", 3, "in-shardings") == [0, None, 1]
    assert parse_shardings("", 2, "in-shardings") == [None, None]
    with pytest.raises(MiraxError, match="2 entries"):
        parse_shardings("0,1", 3, "in-shardings")
    with pytest.raises(MiraxError, match="neither an axis"):
        parse_shardings("x", 1, "out-shardings")
    assert local_shape((8, 6), 0, 4) == (2, 6) and local_shape((8, 6), None, 4) == (8, 6)
