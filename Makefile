# All set-up happens here: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch by default; GPU users: make TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu124" ...
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= runs/demo

.PHONY: install demo test bench screenshots clean

$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[train,dev]'
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/andrea-console $(DEMO_DIR) --start --preset tiny

test: install
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

bench: install
	$(BIN)/python -m bench

screenshots: install
	$(BIN)/python -m tests.console.make_screenshots

clean:
	rm -rf $(VENV) .pytest_cache
