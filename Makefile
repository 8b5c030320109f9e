# Every target creates/uses .venv itself; versions are pinned in pyproject.toml + requirements.lock.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c requirements.lock -e ".[dev,hf]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/prb demo

test: $(STAMP)
	$(VENV)/bin/ruff check pipeline tests bench
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check pipeline tests bench
	$(VENV)/bin/ruff format --check pipeline tests bench

clean:
	rm -rf $(VENV) outputs/demo
