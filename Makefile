# Two entry points: `make demo` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_PROMPT ?= How to draw a cat step by step?

.PHONY: demo test lint typecheck unit install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install --quiet -e '.[dev]'
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

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
