import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest

# Tests never read or fill the user's ~/.cache/mirax; MIRAX_TEST_CACHE_DIR keeps one
# across runs (the Makefile points it at build/kernel-cache). Set at import time: test
# modules compile kernels while being collected, and subprocesses inherit it.
if os.environ.get("MIRAX_TEST_CACHE_DIR"):
    os.environ["MIRAX_CACHE_DIR"] = os.environ["MIRAX_TEST_CACHE_DIR"]
else:
    _kernel_dir = tempfile.mkdtemp(prefix="mirax-test-kernels-")
    os.environ["MIRAX_CACHE_DIR"] = _kernel_dir
    atexit.register(shutil.rmtree, _kernel_dir, ignore_errors=True)  # after the cache's exit flush


@pytest.fixture
def rng():
    return np.random.default_rng(0)
