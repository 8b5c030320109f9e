"""One run at a time per run directory.

The lock is an advisory `flock` on `<run_dir>/run.lock`: the kernel drops it when the holder
exits, however it exits (kill -9 included), so a dead run can never block the next one. Who
holds it (pid, host, start time) is written beside it in `run.lock.json`, for the message a
second run gets; a leftover `run.lock.json` of a process that is gone is how a stale lock from a
crashed run is recognised (and reported) when the next run takes the lock over.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from pipeline.errors import PrbError
from pipeline.store import atomic_write

log = logging.getLogger("prb.lock")


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

    def acquire(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self.holder()
            who = describe(holder) if holder else "a process that has not yet said who it is"
            raise RunLockedError(
                f"run directory {self.run_dir} is in use by another prb run ({who}); "
                f"wait for it to finish or stop it, or pick another --run-id"
            ) from None
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
