# `make run` runs the demo on the CPU; `make test` runs every test (lit + pytest).
# Both create the virtual environment and install everything on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# compiled kernels persist here between test runs (any change to the compiler invalidates them)
MIRAX_TEST_CACHE_DIR ?= $(CURDIR)/build/kernel-cache

.PHONY: run test lit pytest bench tune fuzz setup clean test-aarch64 aarch64-smoke

$(STAMP): pyproject.toml
	@command -v python3 >/dev/null || (apt-get update -qq && apt-get install -y -qq python3 python3-venv)
	@python3 -m venv --help >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq python3-venv)
	@# LLVM's OpenMP runtime (__kmpc_*) lets large kernels use every core; without it they run serially
	@ldconfig -p 2>/dev/null | grep -q 'libomp\.so\.5' || ! command -v apt-get >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq libomp5) || \
		echo "warning: could not install libomp5 (LLVM OpenMP runtime): CPU kernels will run on one thread"
	@# the GPU target: Vulkan loader + Mesa drivers (lavapipe runs Vulkan on the CPU), spirv-val,
	@# and SPIRV-Cross's C library (SPIR-V -> Metal Shading Language)
	@(ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1 \
		&& command -v spirv-val >/dev/null && ldconfig -p 2>/dev/null | grep -q 'libspirv-cross-c-shared\.so\.0') \
		|| ! command -v apt-get >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq libvulkan1 mesa-vulkan-drivers spirv-tools \
			libspirv-cross-c-shared0) || \
		echo "warning: could not install libvulkan1 mesa-vulkan-drivers spirv-tools libspirv-cross-c-shared0: the GPU tests will fail"
	@# a C compiler builds lowering/native_walk.c (our passes' walks in C); without one they stay in Python
	@command -v cc >/dev/null || ! command -v apt-get >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq gcc libc6-dev) || \
		echo "warning: could not install gcc: the passes' walks will run in Python (slower compiles)"
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,distributed]'
	@# bytecode for the sources, as a wheel install has (an editable install has none, and
	@# with PYTHONDONTWRITEBYTECODE set none is ever written: each process compiled
	@# matmul_codegen.py, 10 ms of a first compile)
	$(PY) -m compileall -q lowering runtime dialect python >/dev/null
	$(PY) -c "from mirax.lowering import native_walk; native_walk.available() or print('warning: lowering/native_walk.c did not build: walks run in Python')"
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) examples/demo.py

lit: $(STAMP)
	$(VENV)/bin/lit -sv test/lit

# one process per test file, each keeping at most 128 kernels in memory: a JIT-compiled
# kernel holds ~6 MB, so one process for the whole suite peaked at 6.8 GB warm and 13 GB
# cold, and test_primitives.py alone at 2.36 GB cold with the default 1024 (750 MB with
# 128, as fast: the disk cache shares kernels between processes and reloads are cheap)
TEST_ENV = MIRAX_TEST_CACHE_DIR=$(MIRAX_TEST_CACHE_DIR) MIRAX_KERNEL_CACHE_CAPACITY=128 MIRAX_KERNEL_MEMORY_CAPACITY=128
# Two files at a time (a cold cache's compiles are single-threaded: 13.3 -> ~8 min on 2
# cores), each file's output printed whole when it ends; the GPU tests (the longest) first,
# and the distributed ones (2-4 MPI ranks each) alone at the end.
PYTEST_JOBS ?= 2
SERIAL_TESTS := test/python/test_distributed.py
PARALLEL_TESTS := test/python/test_gpu.py $(filter-out test/python/test_gpu.py $(SERIAL_TESTS),$(wildcard test/python/test_*.py))
RUN_TEST_FILE = f="$$1"; log=build/test-logs/$$(basename $$f .py).log; \
	if $(TEST_ENV) $(PY) -m pytest -q "$$f" > "$$log" 2>&1; then echo "== $$f: $$(tail -n 1 "$$log")"; \
	else echo "== $$f FAILED"; cat "$$log"; exit 1; fi
pytest: $(STAMP)
	@mkdir -p build/test-logs
	@status=0; \
	printf '%s\n' $(PARALLEL_TESTS) | xargs -P $(PYTEST_JOBS) -I{} sh -c '$(RUN_TEST_FILE)' _ {} || status=1; \
	for f in $(SERIAL_TESTS); do sh -c '$(RUN_TEST_FILE)' _ $$f || status=1; done; \
	exit $$status

test: lit pytest aarch64-smoke

# the fuzzers' long campaign (CI runs a small, reproducible budget of both in `make test`):
# random programs through the Python API, then mutated .mlir files through mirax-opt
FUZZ_EXAMPLES ?= 2000
FUZZ_MLIR_CASES ?= 20000
fuzz: $(STAMP)
	$(TEST_ENV) MIRAX_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q test/python/test_fuzz.py --hypothesis-show-statistics
	$(PY) test/python/mlir_fuzz.py --cases $(FUZZ_MLIR_CASES) --save build/fuzz-failures

# the benchmarks behind the README's table (installs the `bench` extra: jax, scipy);
# `python -m mirax.tune` first, so the code generator uses this host's measured tiles
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(VENV)/bin/pip install -q -e '.[test,distributed,bench]'
	touch $(BENCH_STAMP)

# `make tune bench ISA=avx2` tunes and measures the AVX2 code on an AVX-512 host, the
# peers capped alike (bench/_host.py: OpenBLAS's Haswell kernels, XLA's --xla_cpu_max_isa)
BENCHES := eager_overhead cache elementwise matmul sort conv train_step transformer_step eager_grad \
	checkpoint_memory donation compile_time
ISA_ENV := $(if $(ISA),MIRAX_CPU_MAX_ISA=$(ISA))

tune: $(STAMP)
	$(ISA_ENV) $(PY) -m mirax.tune

bench: $(BENCH_STAMP)
	for b in $(BENCHES); do $(ISA_ENV) $(PY) bench/$$b.py || exit 1; done

# The CPU code generator's AArch64 paths (NEON: Neoverse N1; SVE: Neoverse V1), compiled
# for and run on qemu-user's emulated CPUs (test/aarch64/: Debian's arm64 Python and the
# wheels' arm64 builds): whether the code is right, not how fast it runs
# (~1 hour: emulated LLVM compiles ~15x slower). `make test` runs the smoke part: the CPU
# code generation tests and the dot products on the SVE CPU (~3 minutes, set-up included;
# skipped where the host is AArch64 itself, or has no apt-get to install qemu)
AARCH64_CPUS ?= neoverse-n1 neoverse-v1
AARCH64_TESTS ?= test/python/test_cpu_codegen.py test/python/test_rowwise_kernels.py \
	test/python/test_matmul_codegen.py test/python/test_matmul_dot.py test/python/test_primitives.py
AARCH64_SMOKE ?= test/python/test_cpu_codegen.py test/python/test_matmul_dot.py
test-aarch64: $(STAMP)
	test/aarch64/setup.sh
	for cpu in $(AARCH64_CPUS); do test/aarch64/run.sh $$cpu -m pytest -q -p no:cacheprovider $(AARCH64_TESTS) || exit 1; done
aarch64-smoke: $(STAMP)
	@if [ "$$(uname -m)" = aarch64 ] || [ "$$(uname -m)" = arm64 ]; then echo "== aarch64 smoke: skipped (this host is AArch64: the tests above ran on it)"; \
	elif ! command -v apt-get >/dev/null && ! command -v qemu-aarch64-static >/dev/null; then echo "== aarch64 smoke: skipped (no apt-get to install qemu-user-static)"; \
	else mkdir -p build/test-logs; test/aarch64/setup.sh > build/test-logs/aarch64-setup.log 2>&1 || { cat build/test-logs/aarch64-setup.log; exit 1; }; \
		if test/aarch64/run.sh neoverse-v1 -m pytest -q -p no:cacheprovider $(AARCH64_SMOKE) > build/test-logs/aarch64.log 2>&1; \
		then echo "== aarch64 smoke (neoverse-v1, emulated): $$(tail -n 1 build/test-logs/aarch64.log)"; \
		else echo "== aarch64 smoke (neoverse-v1, emulated) FAILED"; cat build/test-logs/aarch64.log; exit 1; fi; fi

clean:
	rm -rf $(VENV) build test/lit/Output
