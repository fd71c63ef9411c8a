"""The transforms' Python API: the seed guide's examples, trees, custom rules,
checkpoint, nesting and errors."""
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest

import mirax as mr
from mirax.utils import tree_flatten, tree_map, tree_unflatten


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# ---- the seed's examples, translated -------------------------------------------------------

def test_seed_derivatives_of_sum_of_cubes():
    f = lambda x: (x * x * x).sum()  # noqa: E731
    x = mr.array([1.0, 2.0])
    close(mr.grad(f)(x), [3.0, 12.0])
    close(mr.grad(lambda x: mr.grad(f)(x).sum())(x), [6.0, 12.0])


def test_seed_value_and_grad_with_aux_of_a_linear_model():
    x, y = mr.array([[1.0, 2.0], [3.0, 4.0]]), mr.array([1.0, 0.0])

    def loss(params):
        w, b = params
        pred = x @ w + b
        err = pred - y
        return (err * err).mean(), pred

    (value, pred), (gw, gb) = mr.value_and_grad(loss)((mr.array([0.5, -0.5]), mr.array([0.0])))
    assert pred.shape == (2,) and gw.shape == (2,) and gb.shape == (1,)
    w, b = np.array([0.5, -0.5]), 0.0
    xn, yn = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 0.0])
    err = xn @ w + b - yn
    close(value, (err ** 2).mean())
    close(gw, 2 * xn.T @ err / 2)
    close(gb, [2 * err.sum() / 2])


def test_seed_jvp_of_sin_and_vjp_of_square():
    _, (t,) = mr.jvp(mr.sin, [mr.array(0.5)], [mr.array(1.0)])
    assert abs(t.item() - math.cos(0.5)) < 1e-6
    _, (g,) = mr.vjp(lambda x: x * x, [mr.array(1.0)], [mr.array(1.0)])
    assert g.item() == 2.0


def test_seed_vmap_matrix_vector_with_in_axes():
    matrix = mr.array([[1.0, 0.0], [0.0, 2.0]])
    vectors = mr.array([[1.0, 1.0], [2.0, 3.0], [0.0, 1.0]])
    out = mr.vmap(lambda m, v: m @ v, in_axes=(None, 0))(matrix, vectors)
    close(out.reshape(-1), [1.0, 2.0, 2.0, 6.0, 0.0, 2.0])


def test_seed_straight_through_estimator():
    @mr.custom_function
    def square(x):
        return x * x

    @square.vjp
    def square_vjp(primals, cotangent, output):
        return cotangent

    x = mr.array([1.0, 2.0])
    close(square(x), [1.0, 4.0])
    close(mr.grad(lambda x: square(x).sum())(x), [1.0, 1.0])


# ---- trees ---------------------------------------------------------------------------------

class Pair(NamedTuple):
    a: object
    b: object


@dataclass
class Params:
    w: object
    bias: object


def test_gradients_come_back_shaped_like_the_argument():
    params = {"layers": [Pair(mr.array([1.0, 2.0]), mr.array(3.0))], "extra": Params(mr.array([2.0]), None)}

    def loss(p):
        layer = p["layers"][0]
        return (layer.a * layer.b).sum() + (p["extra"].w ** 2).sum()

    g = mr.grad(loss)(params)
    assert isinstance(g["layers"][0], Pair) and isinstance(g["extra"], Params) and g["extra"].bias is None
    close(g["layers"][0].a, [3.0, 3.0])
    close(g["layers"][0].b, 3.0)
    close(g["extra"].w, [4.0])


def test_mlx_style_tree_utils():
    tree = {"a": [mr.array(1.0), mr.array(2.0)], "b": {"c": mr.array(3.0)}}
    flat = tree_flatten(tree)
    assert [k for k, _ in flat] == ["a.0", "a.1", "b.c"]
    back = tree_unflatten(flat)
    assert isinstance(back["a"], list) and back["b"]["c"].item() == 3.0
    doubled = tree_map(lambda x: x * 2, tree)
    assert doubled["a"][1].item() == 4.0


def test_argnums_tuple_and_multiple_arguments():
    f = lambda x, y, z: (x * y + z).sum()  # noqa: E731
    gx, gz = mr.grad(f, argnums=(0, 2))(mr.array([1.0, 2.0]), mr.array([3.0, 4.0]), mr.array([0.0, 0.0]))
    close(gx, [3.0, 4.0])
    close(gz, [1.0, 1.0])


# ---- nesting ---------------------------------------------------------------------------------

def test_per_example_gradients_are_vmap_of_grad():
    xs = mr.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    g = mr.vmap(mr.grad(lambda x: (mr.sin(x) * x).sum()))(xs)
    xn = np.asarray(xs)
    close(g, np.cos(xn) * xn + np.sin(xn))


def test_jvp_of_grad_and_vmap_of_vmap():
    f = lambda x: (x ** 3).sum()  # noqa: E731
    _, (t,) = mr.jvp(mr.grad(f), [mr.array([1.0, 2.0])], [mr.array([1.0, 1.0])])
    close(t, [6.0, 12.0])
    x = mr.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    close(mr.vmap(mr.vmap(lambda a: a * 2 + 1))(x), np.asarray(x) * 2 + 1)


def test_jacobians_and_hessian():
    f = lambda x: mr.sin(x) * x[0]  # noqa: E731
    x = mr.array([0.5, 1.5])
    xn = np.asarray(x)
    want = np.diag(np.cos(xn) * xn[0])
    want[:, 0] += np.sin(xn)
    close(mr.jacfwd(f)(x), want)
    close(mr.jacrev(f)(x), want)
    h = mr.hessian(lambda x: (x[0] * x[1] ** 2).sum())(mr.array([1.0, 2.0]))
    close(h, [[0.0, 4.0], [4.0, 2.0]])


# ---- custom functions and checkpoint -------------------------------------------------------

def test_custom_jvp_and_vmap_rules_are_used():
    @mr.custom_function
    def f(x):
        return mr.exp(x)

    @f.jvp
    def f_jvp(x, tangent):  # one argument: itself, not a list (MLX)
        return tangent * 100

    @f.vmap
    def f_vmap(x, axis):
        return mr.exp(x) + 1, axis

    @mr.custom_function
    def g(x, y):
        return x * y

    @g.jvp
    def g_jvp(primals, tangents):  # several: lists
        return tangents[0] * 10 + tangents[1]

    @g.vmap
    def g_vmap(inputs, axes):
        return inputs[0] * inputs[1] + 1, axes[0]
    _, (tg,) = mr.jvp(g, [mr.array(1.0), mr.array(2.0)], [mr.array(1.0), mr.array(1.0)])
    assert tg.item() == 11.0
    close(mr.vmap(g)(mr.array([1.0, 2.0]), mr.array([3.0, 4.0])), [4.0, 9.0])

    _, (t,) = mr.jvp(f, [mr.array(1.0)], [mr.array(1.0)])
    assert t.item() == 100.0
    close(mr.vmap(f)(mr.array([0.0, 1.0])), [2.0, math.e + 1])
    # without a vjp rule, reverse mode differentiates the body
    close(mr.grad(lambda x: f(x))(mr.array(1.0)), math.e)


def test_checkpoint_gradients_equal_plain_gradients():
    def block(x):
        return mr.tanh(x @ mr.array([[1.0, 2.0], [3.0, 4.0]])) * x

    loss = lambda x: block(block(x)).sum()  # noqa: E731
    loss_ck = lambda x: mr.checkpoint(block)(mr.checkpoint(block)(x)).sum()  # noqa: E731
    x = mr.array([[0.1, -0.2], [0.3, 0.4]])
    close(mr.grad(loss_ck)(x), mr.grad(loss)(x))


def test_checkpoint_and_custom_calls_appear_in_the_ir():
    m = mr.trace(lambda x: mr.checkpoint(lambda y: mr.sin(y))(x) + 1, mr.array(1.0))
    text = str(m)
    assert "func.func private @checkpoint_" in text and "mirax.checkpoint" in text


def test_stop_gradient():
    close(mr.grad(lambda x: (x * mr.stop_gradient(x)).sum())(mr.array([2.0, 3.0])), [2.0, 3.0])


# ---- errors --------------------------------------------------------------------------------

def test_grad_of_integer_argument_is_an_error():
    with pytest.raises(TypeError, match="int32"):
        mr.grad(lambda x: x.sum().astype(mr.float32))(mr.array([1, 2]))


def test_evaluating_inside_a_transform_names_the_line():
    def f(x):
        if x.sum().item() > 0:
            return x
        return -x
    assert mr.grad(f)(mr.array(1.0)).item() == 1.0  # grad traces on the values: allowed (MLX)
    with pytest.raises(mr.TraceError) as err:  # vmap's examples have no values
        mr.vmap(f)(mr.array([1.0, 2.0]))
    assert "test_transforms.py" in str(err.value) and "x.sum().item()" in str(err.value)


def test_grad_needs_a_scalar_output():
    with pytest.raises(ValueError, match="scalar"):
        mr.grad(lambda x: x * 2)(mr.array([1.0, 2.0]))


def test_vmap_errors():
    with pytest.raises(ValueError, match="different sizes"):
        mr.vmap(lambda a, b: a + b)(mr.ones((2, 3)), mr.ones((3, 3)))
    with pytest.raises(ValueError, match="out of range"):
        mr.vmap(lambda a: a, in_axes=2)(mr.ones((2, 3)))


def test_complex_gradients_follow_mlx():
    z = mr.array([1 + 1j, 2 - 1j])
    close(mr.grad(lambda z: (2 * mr.real(z)).sum())(z), [2, 2])
    close(mr.grad(lambda z: (2 * mr.imag(z)).sum())(z), [2j, 2j])


def test_checkpoint_replays_dropout_masks():
    key = mr.random.key(0)

    def block(x, k):
        mask = mr.random.bernoulli(0.5, x.shape, key=k)
        return mr.where(mask, mr.tanh(x) * 2, 0.0)

    x = mr.array(np.linspace(-1, 1, 8).reshape(2, 4).astype(np.float32))
    plain = mr.grad(lambda x: block(x, key).sum())(x)
    ck = mr.grad(lambda x: mr.checkpoint(block)(x, key).sum())(x)
    close(ck, plain)
    assert (np.asarray(plain) == 0).any()  # the mask did drop something

    def block2(x):  # the global random state, split at trace time
        return x * mr.random.bernoulli(0.5, x.shape)
    mr.random.seed(3)
    a = mr.grad(lambda x: (block2(x) * x).sum())(x)
    mr.random.seed(3)
    b = mr.grad(lambda x: (mr.checkpoint(block2)(x) * x).sum())(x)
    close(a, b)


def test_registered_tree_nodes():
    from mirax.utils import register_tree_node

    class Box:
        def __init__(self, v, name):
            self.v, self.name = v, name
    register_tree_node(Box, lambda b: ([b.v], b.name), lambda name, cs: Box(cs[0], name))
    g = mr.grad(lambda b: (b.v ** 2).sum())(Box(mr.array([1.0, 2.0]), "w"))
    assert isinstance(g, Box) and g.name == "w"
    close(g.v, [2.0, 4.0])


def test_a_type_flattened_as_a_leaf_can_be_registered_later():
    """tree_flatten remembers the types it found to be leaves; registering one makes it
    a node from then on."""
    from mirax.tree import register_tree_node, tree_flatten, tree_unflatten

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b
    p = Pair(mr.array(1.0), mr.array(2.0))
    leaves, _ = tree_flatten([p, p])
    assert leaves == [p, p]
    register_tree_node(Pair, lambda q: ([q.a, q.b], None), lambda _, cs: Pair(*cs))
    leaves, td = tree_flatten({"x": [p, None]})
    assert len(leaves) == 2 and leaves[0] is p.a
    back = tree_unflatten(td, leaves)
    assert isinstance(back["x"][0], Pair) and back["x"][1] is None

    class Sub(Pair):  # a subclass of a registered node is one too
        pass
    assert len(tree_flatten(Sub(1, 2))[0]) == 2


def test_tree_leaves_walks_as_tree_flatten_does():
    """tree_leaves (mr.eval's walk of a model's state every step) skips tree_flatten's
    TreeDef but finds the same leaves in the same order: dicts, lists, tuples, None,
    NamedTuples, dataclasses, modules and registered nodes, with and without `children`,
    and is_leaf."""
    import collections
    import dataclasses
    from mirax import nn
    from mirax.tree import register_tree_node, tree_flatten, tree_leaves

    Point = collections.namedtuple("Point", "x y")

    @dataclasses.dataclass
    class Cell:
        a: object
        b: object

    class Tagged:
        def __init__(self, v):
            self.v = v

    class Quick(Tagged):
        pass
    register_tree_node(Tagged, lambda t: ([t.v, 7], "tag"), lambda _, cs: Tagged(cs[0]))
    register_tree_node(Quick, lambda t: ([t.v, 8], "q"), lambda _, cs: Quick(cs[0]), children=lambda t: [t.v, 8])
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    tree = {"m": model, "p": Point(1, [2, None]), "c": Cell((3,), {"z": 4, "a": 5}), "t": Tagged([6]),
            "q": Quick({"k": 9}), "n": None, "s": "text", "e": [], "d": {}}
    for is_leaf in (None, lambda x: isinstance(x, tuple)):
        want = tree_flatten(tree, is_leaf)[0]
        got = tree_leaves(tree, is_leaf)
        assert len(got) == len(want) and all(g is w for g, w in zip(got, want))
    assert len(tree_leaves(model)) == 4 and tree_leaves(None) == [] and tree_leaves(5) == [5]


def test_closures_over_outer_traces_compose():
    # the inner grad closes over y, a value of the outer grad's trace
    f = lambda y: mr.grad(lambda x: (x * y) ** 2)(mr.array(1.0))  # d/dx = 2 x y^2  # noqa: E731
    close(mr.grad(f)(mr.array(3.0)), 12.0)  # d/dy 2 y^2 = 4y


def test_vmap_out_axes_per_leaf_in_axes_and_negative_axes():
    x = mr.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = mr.vmap(lambda a: a * 2, in_axes=-1, out_axes=1)(x)  # map over the 3 columns, stack as columns
    close(out, np.asarray(x) * 2)
    params = {"w": mr.array(np.ones((4, 3), np.float32)), "b": mr.array(np.arange(3, dtype=np.float32))}
    res = mr.vmap(lambda p: p["w"] + p["b"], in_axes=({"w": 0, "b": None},))(params)
    close(res, np.ones((4, 3)) + np.arange(3))
    a, b = mr.vmap(lambda v: (v.sum(), v * 2), out_axes=(0, 1))(x)
    close(a, [3.0, 12.0])
    close(b, (np.asarray(x) * 2).T)


def test_evaluated_intermediates_are_constants_in_later_traces():
    c = mr.ones((3,)) * 2
    mr.eval(c)
    close(mr.grad(lambda x: (x * c).sum())(mr.ones((3,))), [2.0, 2.0, 2.0])
