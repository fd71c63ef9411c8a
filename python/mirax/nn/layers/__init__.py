"""The layers of `mirax.nn`."""
from .base import Module  # noqa: F401
from .activations import *  # noqa: F401,F403
from .linear import Bilinear, Identity, Linear  # noqa: F401
from .containers import Sequential  # noqa: F401
from .dropout import Dropout, Dropout2d, Dropout3d  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .quantized import QuantizedEmbedding, QuantizedLinear, quantize  # noqa: F401
from .normalization import BatchNorm, GroupNorm, InstanceNorm, LayerNorm, RMSNorm  # noqa: F401
from .convolution import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,  # noqa: F401
                          ConvTranspose3d)
from .transformer import (MultiHeadAttention, Transformer, TransformerDecoder,  # noqa: F401
                          TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer)
from .pooling import AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d  # noqa: F401
from .positional_encoding import ALiBi, RoPE, SinusoidalPositionalEncoding  # noqa: F401
from .recurrent import GRU, LSTM, RNN  # noqa: F401
from .upsample import Upsample, upsample_cubic, upsample_linear, upsample_nearest  # noqa: F401
