# gpufleet: `make up` brings up the local sandbox cluster, `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: up down status test lint bench clean

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

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .cache .collections inventories/local
