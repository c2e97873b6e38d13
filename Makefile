# Two commands for a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch and torchvision are installed first, pinned; override for another build, e.g.
# make run TORCH="torch torchvision --index-url https://download.pytorch.org/whl/cpu"
TORCH ?= torch==2.14.1 torchvision==0.29.1
# One retry of 30 s per connection, not pip's five with back-off: an index that cannot be
# reached is said in about a minute.
PIP_NET ?= --retries 1 --timeout 30
ARGS ?=

.PHONY: run test test-gpu lint format clean browser

$(BIN)/linkbench-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "make: installing $(TORCH) into $(VENV) (from PyPI the CUDA build, about 3 GB; minutes)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIP_NET) $(TORCH) || { echo "make: pip could not \
	install $(TORCH) (above: why); if its index cannot be reached from here, give TORCH= \
	one that can (README: Start here)" >&2; exit 1; }
	@echo "make: installing linkbench and its test tools (-e '.[dev]')"
	$(BIN)/python -m pip install --quiet $(PIP_NET) -e '.[dev]'
	touch $@

run: $(BIN)/linkbench-installed
	$(BIN)/python run.py $(ARGS)

# On a machine whose python3 already has torch and linkbench's other needs (the GPU machine:
# docs/speed.md, "The GPU suite"), skip the virtual environment:
#   make test-gpu PY=python3 SETUP=
PY ?= $(BIN)/python
SETUP ?= $(BIN)/linkbench-installed
# The GPU suite: tests that only need the GPU to work run GPU_WORKERS at a time (pytest-xdist);
# those that time the GPU (marked gpu_timing) run alone after them.
GPU_WORKERS ?= 4
# The CPU suite runs TEST_WORKERS tests at a time (pytest-xdist); TEST_WORKERS=0: one at a time.
TEST_WORKERS ?= 2

test: $(SETUP)
	$(PY) -m pytest -n $(TEST_WORKERS) $(ARGS)

test-gpu: $(SETUP)
	$(PY) -m pytest -m "(gpu or multi_gpu) and not gpu_timing" -n $(GPU_WORKERS) $(ARGS)
	$(PY) -m pytest -m "gpu_timing" $(ARGS)

# The browser the TensorBoard review test drives (tests/analysis/test_tensorboard_review.py):
# Debian's chromium, as root; without it that test is skipped, saying so.
browser:
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

lint: $(BIN)/linkbench-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(BIN)/linkbench-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) outputs/run outputs/multirun
