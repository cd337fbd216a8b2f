# gpufleet: `make up` brings up the local sandbox cluster, `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: up down status test lint bench bench-scale clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

up: $(STAMP)
	$(BIN)/gpufleet up --stack local

down: $(STAMP)
	$(BIN)/gpufleet down --stack local

status: $(STAMP)
	$(BIN)/gpufleet status --stack local

test: $(STAMP)
	bash tests/run_all.sh

lint: $(STAMP)
	bash tests/run_all.sh lint

# The cold step of benchmarks.run removes the node images: never run `make bench` while others use them;
# `make bench-scale` is the scale table alone (issue 17: N = 1, 4, 8, 16 GPU nodes, about 45 minutes on 2 cores).
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run
	$(BIN)/python -m benchmarks.controller_terms
	$(BIN)/python -m benchmarks.scale run

bench-scale: $(STAMP)
	$(BIN)/python -m benchmarks.scale run

clean:
	rm -rf $(VENV) .cache .collections inventories/local
