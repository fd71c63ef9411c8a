# `make run` runs the demo on the CPU; `make test` runs every test (lit + pytest).
# Both create the virtual environment and install everything on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lit pytest bench setup clean

$(STAMP): pyproject.toml
	@command -v python3 >/dev/null || (apt-get update -qq && apt-get install -y -qq python3 python3-venv)
	@python3 -m venv --help >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq python3-venv)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) examples/demo.py

lit: $(STAMP)
	$(VENV)/bin/lit -sv test/lit

pytest: $(STAMP)
	$(PY) -m pytest -q test/python

test: lit pytest

bench: $(STAMP)
	$(PY) bench/eager_overhead.py

clean:
	rm -rf $(VENV) build test/lit/Output
