"""mirax.nn: neural-network layers, losses and initializers with the API of `mlx.nn`.

    import mirax as mr
    import mirax.nn as nn

    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    loss_and_grad = nn.value_and_grad(model, lambda x, y: nn.losses.cross_entropy(model(x), y, reduction="mean"))
    loss, grads = loss_and_grad(x, y)      # grads shaped like model.trainable_parameters()
    model.update(tree_map(lambda p, g: p - 0.1 * g, model.trainable_parameters(), grads))
"""
from . import init, losses  # noqa: F401
from .layers import *  # noqa: F401,F403
from .layers.transformer import scaled_dot_product_attention  # noqa: F401
from .utils import checkpoint, value_and_grad  # noqa: F401
from .distributed import (AllToShardedLinear, QuantizedAllToShardedLinear,  # noqa: F401
                          QuantizedShardedToAllLinear, ShardedToAllLinear, average_gradients, shard_inplace,
                          shard_linear)
