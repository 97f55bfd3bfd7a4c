# Two entry points: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
UV_VERSION ?= 0.13.9
UV_PIP = eval "$$($(BIN)/python tools/uv_env.py)" && $(BIN)/uv pip install --python $(BIN)/python
DEMO_PROMPT ?= How to draw a cat step by step?

.PHONY: demo demo-install test lint typecheck unit quick install clean

# The test install uses uv too (below): faster than pip (which took 100 s), with the same versions resolved.
# --compile-bytecode: uv, unlike pip, leaves the .pyc files to the first import, and where
# PYTHONDONTWRITEBYTECODE is set (as in this workplace's shell) every test's child process then compiles
# torch, transformers and the rest from source again, about 11 s a process; compiling once costs about 50 s
# of install (38 s without, 88 s with, on a slow machine). Figures: docs/notes/test-suite.md.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(UV_PIP) --quiet --compile-bytecode torch==2.14.1 torchvision==0.29.1
	$(UV_PIP) --quiet --compile-bytecode -e '.[dev,demo,serving,perceptual]'
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	touch $(STAMP)

install: $(STAMP)

# Where PYTHONDONTWRITEBYTECODE is set, Python never writes the .pyc files itself, so the demo's install
# compiles them (as the test install always does); elsewhere the first run writes them and the install
# skips the 50 s.
DEMO_BYTECODE := $(if $(PYTHONDONTWRITEBYTECODE),--compile-bytecode)

# `make demo` installs only what the run needs (no dev tools, no browser), with uv: it unpacks the pinned
# torch (about 5 GB with its CUDA libraries) in parallel, several times faster than pip. The test install
# above, if current, serves the demo too. See docs/notes/decisions.md, "The first demo".
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ ! pyproject.toml -nt $(STAMP) ]; then touch $@; else $(MAKE) --no-print-directory demo-install; fi

demo-install:
	@echo "== install 1/3: $(VENV) and uv $(UV_VERSION)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	@echo "== install 2/3: torch==2.14.1 torchvision==0.29.1 (about 5 GB unpacked: the longest step)"
	$(UV_PIP) $(DEMO_BYTECODE) torch==2.14.1 torchvision==0.29.1
	@echo "== install 3/3: interleave-thinker and its dependencies"
	$(UV_PIP) $(DEMO_BYTECODE) -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	@echo "== run: the tiny preset, offline"
	$(BIN)/interleave-thinker run "$(DEMO_PROMPT)" --preset tiny --planner-fallback single-step
	@echo "== next: the command is in $(VENV), not on your PATH; activate it first:"
	@echo "   source $(VENV)/bin/activate && interleave-thinker demo --preset tiny"
	@echo "   (or call it by its path: $(BIN)/interleave-thinker --help)"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# Two xdist workers (the test machine has 2 cores; more only fight for them), each file on one worker and
# the longest files first: see tests/helpers/schedule.py and docs/notes/test-suite.md.
TEST_WORKERS ?= 2
unit: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=40

# The edit loop: lint, types and every test not marked slow (no tiny model is built or trained).
quick: lint typecheck
	$(BIN)/python -m pytest -m "not slow" -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
