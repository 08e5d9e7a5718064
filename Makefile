# One entry point for every developer check; CI (.ci/run) calls the same
# targets. Everything Python lives in .venv (created on first use); the
# package is installed from a built wheel, so tests run against what users
# install, not against the source tree.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WHEEL_DIR := dist

.PHONY: venv install downstream-deps gunpowder-venv dacapo-venv system-deps demo docs test pytest stubtest bench-check lint lint-rust lint-python \
	lint-mypy msrv format rust-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "maturin>=1.5,<2" "ruff>=0.6"

venv: $(BIN)/python

# Build the wheel and install it with the test and demo extras.
install: venv
	rm -rf $(WHEEL_DIR)
	$(BIN)/maturin build --release --out $(WHEEL_DIR) --quiet
	$(BIN)/pip install --quiet "$$(ls $(WHEEL_DIR)/daisy-*.whl)[test,demo]"
	$(BIN)/pip install --quiet --force-reinstall --no-deps $(WHEEL_DIR)/daisy-*.whl

# The demo needs only daisy and what its tasks read and write (zarr,
# funlib.persistence): not the test extra. Its output stays in daisy_demo/.
demo: venv
	@echo "make demo: building daisy (Rust, release; a few minutes the first time) ..."
	rm -rf $(WHEEL_DIR)
	$(BIN)/maturin build --release --out $(WHEEL_DIR) --quiet
	$(BIN)/pip install --quiet "$$(ls $(WHEEL_DIR)/daisy-*.whl)[demo]"
	$(BIN)/pip install --quiet --force-reinstall --no-deps $(WHEEL_DIR)/daisy-*.whl
	$(BIN)/python examples/demo.py

test: install downstream-deps system-deps rust-test docs pytest stubtest bench-check

# The documentation site: Sphinx with MyST (the tutorial executed while it
# builds), warnings as errors; writes docs/_build/html/index.html. Needs the
# installed daisy (make install) for the API reference and the tutorial.
docs: install
	rm -rf docs/_build
	$(BIN)/python -m sphinx -W --keep-going -b html -q docs docs/_build/html
	@echo "make docs: open docs/_build/html/index.html"

# volara, a real client of daisy 1.x, for tests/test_downstream_volara.py:
# its runtime dependencies, then volara itself without its daisy<2 pin;
# and volara-metrics, whose blockwise tasks run on volara, with its own
# test suite from its sdist (tests/test_downstream_volara_metrics.py).
# Skipped (and the tests skip, saying why) when the package index is not
# reachable.
VOLARA := volara==1.0.5
VOLARA_METRICS := volara-metrics==0.1.1
SUITES := $(VENV)/downstream-suites
downstream-deps: venv
	@$(BIN)/pip install --quiet -r tests/downstream-requirements.txt \
	  && $(BIN)/pip install --quiet --no-deps "$(VOLARA)" "$(VOLARA_METRICS)" \
	  && rm -rf $(SUITES) && mkdir -p $(SUITES) \
	  && $(BIN)/pip download --quiet --no-deps --no-binary :all: -d $(SUITES) "$(VOLARA_METRICS)" \
	  && tar -xzf $(SUITES)/volara_metrics-*.tar.gz -C $(SUITES) \
	  || echo "make downstream-deps: could not install $(VOLARA) and $(VOLARA_METRICS) (package index unreachable?)"
	@$(MAKE) --no-print-directory gunpowder-venv
	@$(MAKE) --no-print-directory dacapo-venv

# gunpowder 1.4.4, a real client of daisy 1.x, for
# tests/test_downstream_gunpowder.py: it needs zarr 2 and funlib.persistence
# 0.6, so it gets an environment of its own with gunpowder and this
# package's wheel (built by `install`).
GUNPOWDER := gunpowder==1.4.4
GP_VENV := .venv-gunpowder
gunpowder-venv:
	@test -x $(GP_VENV)/bin/python || $(PYTHON) -m venv $(GP_VENV)
	@$(GP_VENV)/bin/pip install --quiet "$(GUNPOWDER)" \
	  && $(GP_VENV)/bin/pip install --quiet --force-reinstall "$$(ls $(WHEEL_DIR)/daisy-*.whl)" \
	  || echo "make downstream-deps: could not install $(GUNPOWDER) (package index unreachable?)"

# dacapo-ml 0.3.5, a deep-learning framework that drives daisy, for
# tests/test_downstream_dacapo.py: its own test suite, run against this
# wheel and against daisy 2.0.0 side by side. It gets an environment of its
# own (torch and its CUDA libraries, some 6 GB), with dacapo-ml's pinned
# dependencies (tests/downstream-dacapo-constraints.txt says why), daisy
# 2.0.0 as dacapo-ml's own dependency brings it, and this wheel in a
# directory beside it (put first on PYTHONPATH to test it); its test suite
# comes from its sdist on the package index (none of it is committed here).
DACAPO := dacapo-ml
DACAPO_VERSION := 0.3.5
DACAPO_VENV := .venv-dacapo
dacapo-venv:
	@test -x $(DACAPO_VENV)/bin/python || $(PYTHON) -m venv $(DACAPO_VENV)
	@$(DACAPO_VENV)/bin/pip install --quiet "$(DACAPO)[test]==$(DACAPO_VERSION)" "daisy==2.0.0" \
	    -c tests/downstream-dacapo-constraints.txt \
	  && rm -rf $(DACAPO_VENV)/daisy-under-test \
	  && $(DACAPO_VENV)/bin/pip install --quiet --no-deps --target $(DACAPO_VENV)/daisy-under-test \
	    "$$(ls $(WHEEL_DIR)/daisy-*.whl)" \
	  && rm -rf $(DACAPO_VENV)/sdist && mkdir -p $(DACAPO_VENV)/sdist \
	  && $(DACAPO_VENV)/bin/pip download --quiet --no-deps --no-binary :all: -d $(DACAPO_VENV)/sdist "$(DACAPO)==$(DACAPO_VERSION)" \
	  && tar -xzf $(DACAPO_VENV)/sdist/*.tar.gz -C $(DACAPO_VENV)/sdist \
	  || echo "make downstream-deps: could not install $(DACAPO)==$(DACAPO_VERSION) (package index unreachable?)"

# Tests use Debian packages: a headless browser for the HTML report
# (chromium, chromium-driver), a single-node SLURM cluster for the
# SLURM spawner (slurmctld, slurmd, slurm-client, munge), and the rest
# named below. Installed here
# when missing (needs root, as CI has).
# A second host for the liveness tests is a network namespace cut off with
# iptables (iproute2, iptables), and a clock step is faked with libfaketime.
SYSTEM_PACKAGES := chromium chromium-driver slurmctld slurmd slurm-client munge \
	iproute2 iptables libfaketime
system-deps:
	@if ! command -v chromedriver >/dev/null || ! command -v slurmd >/dev/null \
	  || ! command -v iptables >/dev/null || ! command -v ip >/dev/null \
	  || ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	fi

pytest:
	$(BIN)/python -m pytest tests -q

# The stub of the native module must match the real module.
stubtest:
	cd /tmp && $(CURDIR)/$(BIN)/python -m mypy.stubtest daisy._daisy

# Every benchmark body once, untimed, with its own result checks: a
# benchmark that no longer runs fails the tests instead of rotting until
# someone times it.
bench-check:
	$(BIN)/python -m pytest benchmarks --benchmark-disable -q

rust-test:
	cargo test --workspace --quiet

lint: msrv lint-rust lint-python lint-mypy

# The declared rust-version covers the language features the code uses and
# is no newer than the installed rustc (no second toolchain needed).
msrv:
	$(PYTHON) .ci/check_msrv.py

lint-rust:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

lint-python: venv
	$(BIN)/ruff check python tests benchmarks examples docs/conf.py docs/_inventories
	$(BIN)/ruff format --check python tests benchmarks examples docs/conf.py docs/_inventories

# mypy --strict on the package (settings in pyproject.toml). mypy and the
# libraries daisy imports come with the package's dependencies and its test
# extra, installed here from pyproject.toml when mypy is missing (lint runs
# before the wheel is built).
lint-mypy: venv
	@$(BIN)/python -c "import mypy" 2>/dev/null || { \
	  $(BIN)/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	    print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))' \
	    > $(VENV)/lint-requirements.txt && \
	  $(BIN)/pip install --quiet -r $(VENV)/lint-requirements.txt; }
	$(BIN)/python -m mypy python/daisy

format: venv
	cargo fmt --all
	$(BIN)/ruff format python tests benchmarks examples
	$(BIN)/ruff check --fix python tests benchmarks examples

bench: install
	$(BIN)/python -m pytest benchmarks --benchmark-only

clean:
	rm -rf $(VENV) $(WHEEL_DIR) target
