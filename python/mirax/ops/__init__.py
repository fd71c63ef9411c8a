"""The user-facing ops of `mirax`, one module per family (MLX signatures)."""
from .creation import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
