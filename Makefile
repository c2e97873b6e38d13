# Two commands for a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch and torchvision are installed first, pinned; override for another build, e.g.
# make run TORCH="torch torchvision --index-url https://download.pytorch.org/whl/cpu"
TORCH ?= torch==2.14.1 torchvision==0.29.1
ARGS ?=

.PHONY: run test test-gpu lint format clean

$(BIN)/linkbench-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

run: $(BIN)/linkbench-installed
	$(BIN)/python run.py $(ARGS)

test: $(BIN)/linkbench-installed
	$(BIN)/python -m pytest $(ARGS)

test-gpu: $(BIN)/linkbench-installed
	$(BIN)/python -m pytest -m "gpu or multi_gpu" $(ARGS)

lint: $(BIN)/linkbench-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(BIN)/linkbench-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) outputs/run outputs/multirun
