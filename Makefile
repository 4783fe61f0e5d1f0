# Two commands do everything on a fresh Debian machine:  make demo  and  make test.
# The system interpreter: a venv built from a python3 under a private home (pyenv in /root) is
# unusable by every other user ("bad interpreter: Permission denied").
PY ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint helppages install install-system uninstall-system install-slurm-compat install-pbs-compat docs-check redis bench clean

# editable_mode=compat: the checkout's folder in a .pth, not setuptools' import finder, which costs every
# labq command (and each the tests start) 11-18 ms of CPU before main(); labq/__init__.py maps
# labq.scheduler/worker/cli to the checkout's folders either way.
# pyproject.toml's ext-modules builds worker/_clone.c (optional: without a C compiler and Python's headers, jobs start
# through the shell + setpriv chain instead; worker/spawn.py).
$(BIN)/labq: pyproject.toml worker/_clone.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test,lint]' --config-settings editable_mode=compat > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@touch $@

# pip's launcher imports re (and so enum) for a Windows suffix: labq/launcher.py writes ours over it,
# again after any later pip install (make bench's) put pip's back.
LAUNCHER = grep -qs "labq/launcher.py" $(BIN)/labq || $(BIN)/python -m labq.launcher $(BIN)/labq

install: $(BIN)/labq
	@$(LAUNCHER)

# For every user of a machine (root): /opt/labq (a venv of /usr/bin/python3 with labq as a wheel),
# /usr/local/bin/labq, /etc/labq/labq.toml when absent, the systemd units, /usr/share/doc/labq.
# PREFIX, BINDIR, SYSCONFDIR, UNITDIR and DOCDIR move each part.
install-system:
	PREFIX=$(or $(PREFIX),/opt/labq) BINDIR=$(or $(BINDIR),/usr/local/bin) \
	SYSCONFDIR=$(or $(SYSCONFDIR),/etc/labq) UNITDIR=$(or $(UNITDIR),/etc/systemd/system) \
	DOCDIR=$(or $(DOCDIR),/usr/share/doc/labq) sh systemd/install-system.sh

# The reverse, with the same variables: the venv, the command's link, the units, the docs. The config
# (SYSCONFDIR) and every state directory (archive, spool, Redis) are kept.
uninstall-system:
	PREFIX=$(or $(PREFIX),/opt/labq) BINDIR=$(or $(BINDIR),/usr/local/bin) \
	SYSCONFDIR=$(or $(SYSCONFDIR),/etc/labq) UNITDIR=$(or $(UNITDIR),/etc/systemd/system) \
	DOCDIR=$(or $(DOCDIR),/usr/share/doc/labq) sh systemd/uninstall-system.sh

# sbatch, srun, squeue, scancel, sacct (and `module`, where no environment modules are) speaking to labq,
# in BINDIR (default /usr/local/bin) for every user of a machine without SLURM; refused where a real
# sbatch is on PATH. Jobs get the same commands from the worker either way (worker.compat_commands).
# PY_FOR_COMPAT: the interpreter the commands run (default: this checkout's venv; /opt/labq/bin/python
# after install-system).
install-slurm-compat: install
	$(BIN)/python -m labq.worker.shimbin --python $(or $(PY_FOR_COMPAT),$(abspath $(BIN))/python) \
	  $(or $(BINDIR),/usr/local/bin) slurm modules

# qsub, qstat, qdel, qhold, qrls (PBS/Torque spellings, SGE's qstat -j) and qacct, the same way; refused
# where a real qsub (PBS or SGE) is on PATH.
install-pbs-compat: install
	$(BIN)/python -m labq.worker.shimbin --python $(or $(PY_FOR_COMPAT),$(abspath $(BIN))/python) \
	  $(or $(BINDIR),/usr/local/bin) pbs sge

# redis-server from Debian when missing: installed when we are root, else we say what to run.
redis:
	@if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; \
	  else \
	    echo "labq needs redis-server: run  sudo apt-get install -y redis-server  then  make demo"; exit 1; \
	  fi; \
	fi

demo: redis install
	$(BIN)/labq demo

# Import order, complexity and pyflakes (ruff) everywhere, types on the pure core (mypy); both
# configured in pyproject.toml. .ci/run runs it before the tests.
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# cli/helppages.txt: every command's --help page as click lays it out at 80 columns, read by the first
# `labq CMD --help` without importing click (cli/helppage.py). Again after any change under cli/.
helppages: install
	$(BIN)/python -m labq.cli.group

# compileall first: where PYTHONDONTWRITEBYTECODE is set (as on the shared dev machines) no import writes
# a .pyc, and every labq process the tests start compiled the checkout's modules again (~20 ms each).
# Best effort (-): a file that does not compile is pytest's to report.
test: redis install
	-$(BIN)/python -m compileall -q -j0 labq scheduler worker cli tests >/dev/null
	$(BIN)/python -m pytest -q

# Runs every `docs-check` block of docs/admin.md in a scratch directory (also part of make test).
docs-check: redis install
	$(BIN)/python -m pytest -q tests/e2e/test_admin_guide.py

# The peers (task-spooler, SLURM) are used when installed and skipped when not; py-spy, for the
# profiles of missed targets, comes from the `bench` extra. `make bench BENCH_ARGS=--quick` for a short run
# (its table goes to bench/out/); `BENCH_ARGS='--only live'` remeasures one group. Every run replaces its
# rows of bench/RESULTS.md, the one current table (bench/current.py); the run's detail: bench/out/REPORT.md.
bench: redis install
	@[ -x $(BIN)/py-spy ] || $(BIN)/pip install -q -e '.[test,bench]' --config-settings editable_mode=compat > $(VENV)/pip-bench.log 2>&1 || \
	  echo "py-spy could not be installed (see $(VENV)/pip-bench.log): the profiles will be skipped"
	@$(LAUNCHER)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
