# Two entry points: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_PROMPT ?= How to draw a cat step by step?

.PHONY: demo test lint typecheck unit quick install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install --quiet -e '.[dev,demo]'
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/interleave-thinker run "$(DEMO_PROMPT)" --preset tiny --planner-fallback single-step

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest

# The edit loop: lint, types and every test not marked slow (no tiny model is built or trained).
quick: lint typecheck
	$(BIN)/python -m pytest -m "not slow" -q

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
