"""A run's directory, `outputs/<run_id>/`: one run at a time, checked before any model call,
and the fingerprint that says whether a resume may reuse its stage files.

- Lock: an advisory `flock` on `run.lock`; the kernel drops it when the holder exits, however it
  exits (kill -9 included). Who holds it (pid, host, start time) is written beside it in
  `run.lock.json`, for the message a second run gets and to report a stale lock taken over.
- Preflight (`open_run`): lock, move an old run aside if asked, clear what an interrupted run
  left half-written, render every build prompt once with sample values (a template naming a
  variable the code does not pass fails now, not after an hour of paid calls), validate the
  persona source as `prb personas validate` does, and check the fingerprint.
- Fingerprint (`fingerprint.json`): what the stage files depend on: the config minus execution-
  only settings and recomputed sections (`RunConfig.resume_inputs`), the hash of every build
  prompt (the stages' and the checks' tasks), the persona source's file digests and the stage
  file format. A resume under another fingerprint is refused, naming what changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
from datetime import UTC, datetime
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.errors import PrbError
from pipeline.llm.prompts import PromptError, all_prompts, load_prompt
from pipeline.store import atomic_write

log = logging.getLogger("prb.rundir")

FINGERPRINT_FILE = "fingerprint.json"
STAGE_FORMAT = 2  # 2: filter results stored per check (FilterRecord.checks[name])
SOURCES = "sources."  # fingerprint keys of the persona and question files read


# --- lock ---------------------------------------------------------------------------------------


class RunLockedError(PrbError, RuntimeError):
    """Another live run holds the run directory."""

    exit_code = 3


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def describe(holder: dict) -> str:
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
        f"started {holder.get('started', '?')}"
    )


class RunLock:
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "run.lock"
        self.info = self.run_dir / "run.lock.json"
        self._fd: int | None = None

    def holder(self) -> dict | None:
        try:
            return json.loads(self.info.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _locked(self) -> RunLockedError:
        holder = self.holder()
        who = describe(holder) if holder else "a process that has not yet said who it is"
        return RunLockedError(
            f"run directory {self.run_dir} is in use by another prb run ({who}); "
            f"wait for it to finish or stop it, or pick another --run-id"
        )

    def check(self) -> None:
        """RunLockedError now if another run holds the lock: a second build of a run id
        answers in a blink, before Prefect starts (the flow takes the lock itself later)."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            raise self._locked() from None
        finally:
            os.close(fd)

    def acquire(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._locked() from None
        self._fd = fd
        stale = self.holder()
        if stale and stale.get("pid") != os.getpid():
            gone = not (stale.get("host") == socket.gethostname() and pid_alive(stale["pid"]))
            log.warning(
                "%s: taking over a stale lock of a run that did not exit cleanly (%s%s)",
                self.run_dir,
                describe(stale),
                ", no longer running" if gone else "",
            )
        with atomic_write(self.info) as f:
            json.dump(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": datetime.now(UTC).isoformat(timespec="seconds"),
                },
                f,
            )
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        self.info.unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# --- fingerprint --------------------------------------------------------------------------------


class FingerprintError(PrbError, ValueError):
    """The config, prompts or persona files changed since this run id started."""


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def run_fingerprint(cfg: RunConfig) -> dict:
    from pipeline.personas.sources import source_for
    from pipeline.stages import build_tasks

    flat = _flatten(cfg.resume_inputs())
    flat.update({f"prompts.{t}": load_prompt(t).sha256 for t in build_tasks(cfg)})
    digests = source_for(cfg.personas).digests(cfg.personas)
    flat.update({SOURCES + path: digest for path, digest in digests.items()})
    flat["prb.stage_format"] = STAGE_FORMAT
    canon = json.dumps(flat, sort_keys=True, ensure_ascii=False)
    return {"fingerprint": hashlib.sha256(canon.encode()).hexdigest()[:16], "inputs": flat}


def _change(key: str, old: object, new: object) -> str:
    if key.startswith(SOURCES):
        what = "added" if old == "(absent)" else "removed" if new == "(absent)" else "edited"
        return f"persona/question file {key.removeprefix(SOURCES)} {what} since the run started"
    if key == "prb.stage_format":
        return f"the run was made by an older prb (stage file format {old!r}, now {new!r})"
    return f"{key}: {old!r} -> {new!r}"


def has_work(run_dir: Path) -> bool:
    return any(Path(run_dir).glob("*.jsonl"))


def check_fingerprint(run_dir: Path, cfg: RunConfig) -> None:
    """Record the fingerprint of a new run; refuse to resume a run under a different one."""
    path = Path(run_dir) / FINGERPRINT_FILE
    now = run_fingerprint(cfg)
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved["fingerprint"] == now["fingerprint"]:
            return
        old, new = saved["inputs"], now["inputs"]
        # a key only one side has counts as changed even when its value is None
        changed = sorted(k for k in old.keys() ^ new.keys()) + sorted(
            k for k in old.keys() & new.keys() if old[k] != new[k]
        )
        shown = "; ".join(
            _change(k, old.get(k, "(absent)"), new.get(k, "(absent)")) for k in changed[:5]
        )
        more = f" (and {len(changed) - 5} more)" if len(changed) > 5 else ""
        raise FingerprintError(
            f"run {cfg.run_id!r} ({run_dir}) was started with other settings, so resuming it "
            f"would mix results: {shown}{more}. Use another --run-id, or --force-new-run to "
            f"move the old run aside and start again"
        )
    if has_work(run_dir):
        log.warning("%s: no saved fingerprint (an older run); adopting the current one", run_dir)
    with atomic_write(path) as f:
        json.dump(now, f, indent=2, sort_keys=True)


# --- lifecycle ----------------------------------------------------------------------------------


def move_aside(run_dir: Path, outputs: Path) -> Path:
    """Rename a run directory to the first free `<run>.old-N`; returns the new path. Only ever
    a run's own folder directly under `outputs`, never the outputs folder or anything else."""
    run_dir = Path(run_dir)
    if run_dir.resolve().parent != Path(outputs).resolve() or run_dir.is_symlink():
        raise PrbError(f"{run_dir}: not a run folder directly under {outputs}; nothing was moved")
    n = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.old-{n}")).exists():
        n += 1
    run_dir.rename(aside)
    return aside


def clean_leftovers(run_dir: Path) -> list[Path]:
    """Remove temp files and half-built releases an interrupted run left behind (the finished
    files they were meant to replace are untouched: they are only ever renamed over)."""
    gone = []
    for p in sorted(Path(run_dir).glob(".*")):
        if p.name.endswith(".tmp") or p.name.startswith(".release-"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            gone.append(p)
    if gone:
        log.info("%s: removed %d leftovers of an interrupted run", run_dir, len(gone))
    return gone


# --- preflight ----------------------------------------------------------------------------------


def check_prompts(cfg: RunConfig) -> None:
    """Load every prompt file and render each build task once with the sample variables its
    stage or check declares; raises PromptError."""
    from pipeline.stages import prompt_samples

    prompts = all_prompts()
    for task, variables in prompt_samples(cfg).items():
        if task not in prompts:
            raise PromptError(f"prompts/{task}.yaml: missing (the build needs it)")
        prompts[task].render(**variables)


def open_run(cfg: RunConfig, *, force_new: bool = False) -> RunLock:
    """Lock the run directory and check it may be (re)used; the caller releases the lock."""
    from pipeline.stages import stages

    run_dir = cfg.run_dir
    lock = RunLock(run_dir).acquire()
    try:
        check_prompts(cfg)
        for stage in stages():  # what only a stage knows of its settings, in run order
            if stage.preflight is not None:
                stage.preflight(cfg)
        if force_new and has_work(run_dir):
            aside = move_aside(run_dir, cfg.run_dir.parent)
            log.warning("--force-new-run: moved the old run %s aside to %s", run_dir, aside)
            lock.info = aside / lock.info.name  # the held lock moved with its directory
            new = RunLock(run_dir).acquire()
            lock.release()
            lock = new
        clean_leftovers(run_dir)
        check_fingerprint(run_dir, cfg)
    except BaseException:
        lock.release()
        raise
    return lock
