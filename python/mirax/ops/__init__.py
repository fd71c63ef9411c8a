"""The user-facing ops of `mirax`, one module per family (MLX signatures)."""
from .creation import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .composite import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
from .quantized import *  # noqa: F401,F403
from .einsum import *  # noqa: F401,F403
from .searching import *  # noqa: F401,F403
from .bits import *  # noqa: F401,F403


def _with_stream(fn):
    """MLX's `stream=` keyword: `mr.add(a, b, stream=mr.gpu)` runs the op on that device
    (a Device, a DeviceType, "cpu"/"gpu" or a Stream), as `with mr.stream(...)` would."""
    import functools

    from .. import device as _device

    @functools.wraps(fn)
    def op(*args, stream=None, **kwargs):
        if stream is None:
            return fn(*args, **kwargs)
        with _device.stream(stream):
            return fn(*args, **kwargs)
    return op


def _add_stream_keyword(namespace, module_prefix):
    """Give every public function of `namespace` defined under `module_prefix` `stream=`."""
    import inspect
    wrapped = {}  # one wrapper per function, so that aliases (`pow = power`) stay the same object
    for _name, _fn in list(namespace.items()):
        if not _name.startswith("_") and inspect.isfunction(_fn) and _fn.__module__.startswith(module_prefix):
            if id(_fn) not in wrapped:
                wrapped[id(_fn)] = _with_stream(_fn)
            namespace[_name] = wrapped[id(_fn)]


_add_stream_keyword(globals(), "mirax.ops.")
