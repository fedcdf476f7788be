# All set-up happens here: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch by default; GPU users: make TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu124" ...
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= runs/demo

.PHONY: install demo lint test bench soak screenshots clean

$(BIN)/.installed: pyproject.toml setup.py console/read/_tensor_sums.c rundir/_line_scan.c Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[train,serve,dev,lightning,transformers]'
	touch $@

install: $(BIN)/.installed

# The dashboard needs a terminal: without one (make demo | tee LOG) say so before installing
# anything, not after a minute of installing.
demo:
	@test -t 1 || { echo "make demo: the dashboard needs a terminal, and stdout is not one (a pipe, as in" \
		"make demo | tee LOG): nothing was installed or started; run it in a terminal (a run as text:" \
		".venv/bin/andrea-console RUN_DIR --once)" >&2; exit 2; }
	@$(MAKE) --no-print-directory install
	$(BIN)/andrea-console $(DEMO_DIR) --start --preset tiny

# A few seconds: ruff (pyflakes and the statement errors, pyproject.toml's [tool.ruff]) over the
# tree, mypy over rundir/ ([tool.mypy]).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# The project's own modules byte-compiled first: the editable install writes no .pyc for them, and
# with PYTHONDONTWRITEBYTECODE set (as on the machines the suite was timed on) no process does, so every console a
# test starts would compile its modules from source again (about 0.3 s of CPU each).
# Three workers on CI's two cores: many tests wait on processes of their own (a launcher starting, SLURM
# scheduling a job, a job's time limit), so a third keeps both cores busy: the whole suite took about a
# tenth less time than with two. The SLURM tests are one group, run by one worker in turn.
test: lint
	$(BIN)/python -m compileall -q -j 0 console trainer rundir bench
	$(BIN)/python -m pytest -n 3 --dist loadgroup -q --durations=25

bench: install
	$(BIN)/python -m bench

# The long reliability runs: the kill -9 campaign at 1,000 kills (about 1 h 30 min on 2 CPUs), the
# readers' fuzzing at 10,000 cases a property, the SLURM torchrun job stopped and resubmitted 10
# times (the suite runs 4), and the dashboard's memory on a live run for 30 minutes; the figures are
# printed at the end.
# Smaller: make soak KILL9_KILLS=5 FUZZ_EXAMPLES=200. The run directories stay in
# SOAK_TMP afterwards (pytest's numbered temporary directories would be removed by the
# next pytest run on this machine, even one running beside the soak).
KILL9_KILLS ?= 1000
FUZZ_EXAMPLES ?= 10000
SOAK_TMP ?= /tmp/andrea-soak
# The dashboard's memory soak (bench soak): 30 minutes of 200 lines a second.
SOAK_S ?= 1800
soak: install
	KILL9_KILLS=$(KILL9_KILLS) FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) SLURM_STOP_CYCLES=10 $(BIN)/python -m pytest \
		-p no:xdist -q --basetemp=$(SOAK_TMP) tests/reliability/test_kill9.py tests/rundir/test_fuzz_readers.py \
		tests/console/test_plot_any_float.py tests/console/test_mirror_hostile.py \
		tests/console/test_mirror_shared.py \
		"tests/slurm/test_jobs.py::test_a_torchrun_job_checkpointed_stopped_and_resubmitted_ends_completed_every_time"
	ANDREA_SOAK_S=$(SOAK_S) $(BIN)/python -m bench soak

screenshots: install
	$(BIN)/python -m tests.console.make_screenshots

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build rundir/_line_scan.*.so console/read/_tensor_sums.*.so
