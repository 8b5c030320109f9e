# Every target creates/uses .venv itself; versions are pinned in pyproject.toml + requirements.lock.
# `make demo` installs only what the demo runs; the tests add the dev tools and the `hf` extra
# (torch, transformers) that the HF reward-model tests use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-test
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1

.PHONY: demo test lint install clean

$(BASE): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c requirements.lock -e .
	touch $(BASE)

$(FULL): $(BASE)
	$(PY) -m pip install -q -c requirements.lock -e ".[dev,hf]"
	touch $(FULL)

install: $(FULL)

demo: $(BASE)
	$(VENV)/bin/prb demo

test: $(FULL)
	$(VENV)/bin/ruff check pipeline tests bench
	$(VENV)/bin/pytest -q

lint: $(FULL)
	$(VENV)/bin/ruff check pipeline tests bench
	$(VENV)/bin/ruff format --check pipeline tests bench

clean:
	rm -rf $(VENV) outputs/demo
