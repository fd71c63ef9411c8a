"""mirax: an MLX-style array framework whose primitives are an MLIR dialect.

    import mirax as mr
    x = mr.array([1.0, 2.0, 3.0])
    print(mr.exp(x).sum())
"""
from .dialect.dtypes import (bfloat16, bool_, complex64, float16, float32, float64, int8, int16,  # noqa: F401
                              int32, int64, uint8, uint16, uint32, uint64, Dtype)
from .dialect.core import MiraxError  # noqa: F401
from .array import Array, TraceError, array, asarray, async_eval, eval, from_dlpack  # noqa: F401
from .array import ArrayIterator, ArrayLike  # noqa: F401
from .device import (Device, DeviceType, Stream, cpu, default_device, default_stream, device_count,  # noqa: F401
                     device_info, gpu, is_available, new_stream, set_default_device, set_default_stream, stream,
                     synchronize)
from .ops import *  # noqa: F401,F403
from .trace import trace  # noqa: F401
from .transforms import grad, hessian, jacfwd, jacrev, jvp, value_and_grad, vjp, vmap  # noqa: F401
from .custom import checkpoint, custom_function  # noqa: F401
from .compile import compile, disable_compile, enable_compile  # noqa: F401
from . import utils  # noqa: F401
from .memory import (clear_cache, get_active_memory, get_cache_memory, get_peak_memory,  # noqa: F401
                     reset_peak_memory, set_cache_limit, set_memory_limit, set_wired_limit)
from .memory import get_array_buffer_size, get_memory_limit  # noqa: F401
from .dtypes import (DtypeCategory, can_cast, complexfloating, e, euler_gamma, finfo, floating, generic,  # noqa: F401
                     iinfo, inexact, inf, integer, isdtype, issubdtype, nan, newaxis, number, pi, result_type,
                     signedinteger, unsignedinteger)
from . import random  # noqa: F401
linalg = __import__("importlib").import_module(__name__ + ".linalg")  # not ops.linalg, which `from .ops import *` bound
matrix_norm = linalg.norm  # MLX: mx.matrix_norm is mx.linalg.norm
from . import fft  # noqa: F401
from .io import load, save, save_gguf, save_safetensors, savez, savez_compressed  # noqa: F401
from . import cuda, metal  # noqa: F401
from . import fast  # noqa: F401
from .export import FunctionExporter, export_function, export_to_dot, exporter, import_function  # noqa: F401
from .printing import PrintOptions, get_printoptions, printoptions, set_printoptions  # noqa: F401
from .streams import (StreamContext, ThreadLocalStream, clear_streams, new_thread_local_stream,  # noqa: F401
                      new_thread_unsafe_stream)
from . import distributed  # noqa: F401

__version__ = "0.1.0"
