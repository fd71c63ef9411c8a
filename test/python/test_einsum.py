"""mr.einsum and mr.einsum_path against numpy: contraction order, diagonals, sums,
ellipsis broadcasting, outer products, batched matmuls, errors, grad/vmap/compile."""
import numpy as np
import pytest

import mirax as mr

SIZES = dict(zip("abcdefghij", [2, 3, 4, 5, 2, 3, 4, 5, 2, 3]))


def _operands(rng, equation):
    lhs = equation.split("->")[0]
    return [rng.standard_normal(tuple(SIZES[c] for c in t)).astype(np.float32) for t in lhs.split(",")]


@pytest.mark.parametrize("equation", [
    "ij->ji", "ii->i", "ii", "iijj->ij", "ijij->j", "ij->",       # one operand: transpose, diagonal, sums
    "ab,bc", "ab,cb->ca", "i,i", "a,b->ab", "ab,ab->ab",         # matmul, inner, outer, hadamard
    "abcd,fgda->bfca", "aab,bcc->ac", "ab,bc->c",                # medley, diagonals then dot, sum first
    "ab,bcd,cd->abd", "ea,fb,abcd,gc,hd->efgh", "ab,ab,c->c",    # greedy paths
])
def test_einsum_matches_numpy(rng, equation):
    ops = _operands(rng, equation)
    got = mr.einsum(equation, *[mr.array(x) for x in ops])
    want = np.einsum(equation, *ops)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("equation,shapes", [
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),   # ellipsis batch dims broadcast
    ("...ij,...jk", [(1, 3, 4), (2, 4, 5)]),             # implicit output keeps the ellipsis first
    ("a...d->...", [(2, 3, 4, 5)]),
    ("ab...,b...->a...", [(2, 3, 4), (3, 4)]),
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),            # an explicit size-1 label broadcasts too
])
def test_einsum_ellipsis_and_broadcast(rng, equation, shapes):
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = mr.einsum(equation, *[mr.array(x) for x in ops])
    want = np.einsum(equation, *ops)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_einsum_integer_dtype_and_exact_values():
    m = np.arange(16, dtype=np.int32).reshape(4, 4)
    got = mr.einsum("ii->i", mr.array(m))
    assert got.dtype == mr.int32 and got.tolist() == [0, 5, 10, 15]
    assert mr.einsum("ij->", mr.array(m)).item() == 120


def test_einsum_path_is_the_greedy_order(rng):
    a, b, c = mr.zeros((5, 8)), mr.zeros((8, 10)), mr.zeros((10, 7))
    path, info = mr.einsum_path("ij,jk,kl", a, b, c)
    assert path == [(1, 2), (0, 1)]   # the 8x10x7 product first, as numpy's greedy order
    assert "Optimized FLOP count" in info and "ij,jk,kl" in info
    assert mr.einsum_path("ij,jk,kl", mr.zeros((5, 8)), mr.zeros((8, 3)), mr.zeros((3, 7)))[0] == [(0, 1), (0, 1)]
    assert mr.einsum_path("ii->i", mr.zeros((5, 5)))[0] == [(0,)]
    for eq in ["dd,fb,be,cdb->cef", "bca,cdb,dbf,afc->", "dcc,fce,ea,dbf->ab"]:
        ops = _operands(rng, eq)
        assert mr.einsum_path(eq, *[mr.array(x) for x in ops])[0] == np.einsum_path(eq, *ops)[0][1:]


def test_einsum_contracts_with_matmul(rng):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    text = mr.compile(lambda x, y: mr.einsum("ij,jk->ik", x, y)).lower(mr.array(a), mr.array(b)).as_text("mirax")
    assert "mirax.matmul" in text and "mirax.multiply" not in text


def test_einsum_grad_vmap_compile(rng):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    ga, gb = mr.grad(lambda x, y: mr.einsum("ij,jk->", x, y), argnums=(0, 1))(mr.array(a), mr.array(b))
    np.testing.assert_allclose(np.asarray(ga), np.broadcast_to(b.sum(1), (3, 4)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gb), np.broadcast_to(a.sum(0)[:, None], (4, 5)), rtol=1e-5)
    batch = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got = mr.vmap(lambda x: mr.einsum("ij,jk->ki", x, mr.array(b)))(mr.array(batch))
    np.testing.assert_allclose(np.asarray(got), np.einsum("nij,jk->nki", batch, b), rtol=1e-4, atol=1e-5)
    sq = rng.standard_normal((4, 4)).astype(np.float32)
    f = mr.compile(lambda x, y: mr.einsum("ii,ij->j", x, y))
    np.testing.assert_allclose(np.asarray(f(mr.array(sq), mr.array(b))), np.einsum("ii,ij->j", sq, b),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("equation,shapes,match", [
    ("ij,jk", [(2, 3)], "operands"),
    ("a...b...c->abc", [(2, 3, 4)], "one ellipsis"),
    ("i1->i", [(2, 3)], "letters"),
    ("ij->ii", [(2, 2)], "repeated"),
    ("ii->i", [(2, 3)], "different sizes"),
    ("ijk->i", [(2, 3)], "2 dims"),
    ("ij,jk", [(2, 3), (4, 5)], "broadcast"),
    ("ij->k", [(2, 3)], "does not appear"),
])
def test_einsum_errors(equation, shapes, match):
    with pytest.raises(ValueError, match=match):
        mr.einsum(equation, *[mr.zeros(s) for s in shapes])
    with pytest.raises(ValueError, match="einsum_path"):
        mr.einsum_path(equation, *[mr.zeros(s) for s in shapes])


def test_einsum_needs_an_operand():
    with pytest.raises(ValueError, match="at least one operand"):
        mr.einsum("i->i")
