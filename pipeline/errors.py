"""Errors a user can act on, and the exit codes `prb` gives them.

Every error that bad input, a bad setting or the environment can cause derives from `PrbError`:
its message is one line naming the file, the record and what to do, and the CLI prints it with
no traceback. Anything else is a bug: the CLI prints one line naming the file where it wrote
the traceback, and exits 70 (PRB_TRACEBACK=1 shows the traceback instead).

Exit codes: 0 done; 1 a check found problems (`release verify`, `annotate import`) or a bug;
2 bad input or changed settings; 3 run directory locked by another run; 4 the endpoint refused
the run (bad key, unknown model); 5 the build released no pair; 6 the disk is full;
7 most of the work was lost to endpoint errors (a build released fewer pairs than it lost to
them, or a reward model failed on most pairs): the results are written, rerun to resume;
8 a server's port is already in use; 9 the judge failed qualification (see
`--accept-weak-judge`); 70 an internal error (a bug: one line, the traceback in
a file it names); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM).
"""

from __future__ import annotations

import errno
import re
import sys

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class PrbError(Exception):
    """An error with a one-line message the user can act on."""

    exit_code = 2


class StorageError(PrbError):
    """The disk refused a write: full, over a size limit, or failing."""

    exit_code = 6

    def __init__(self, path: object, what: str = "a disk I/O error"):
        self.path = str(path)
        super().__init__(
            f"{what} while writing {self.path}; check the disk (free space, health) and rerun "
            "the same command to resume: nothing finished is lost"
        )


class DiskFullError(StorageError):
    def __init__(self, path: object):
        super().__init__(path, "disk full (or file size limit reached)")


class NothingReleased(PrbError):
    """The build ran to the end but no pair survived: a release of nothing is no release."""

    exit_code = 5


class MostlyFailed(PrbError):
    """The command finished, but most of its model calls failed at the endpoint: what it wrote
    says little. Transient failures are asked again by the same command (resume)."""

    exit_code = 7


class PortInUse(PrbError):
    """A server cannot listen: its address is taken (say so before claiming to listen)."""

    exit_code = 8


class Terminated(SystemExit):
    """SIGTERM: raised in the main thread so every `finally` runs before prb exits 143. A
    SystemExit, so asyncio lets it through its callbacks and transports (pipeline/run/
    stopping.py); uncaught, the process still exits 143."""

    def __init__(self, *_: object):
        super().__init__(143)


def is_termination(e: BaseException | None) -> bool:
    """SIGTERM as prb raises it (Terminated) or as Prefect does, if Prefect is loaded at all."""
    exceptions = sys.modules.get("prefect.exceptions")
    return isinstance(e, Terminated) or (
        exceptions is not None and isinstance(e, exceptions.TerminationSignal)
    )


DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


DISK_FULL_WORDS = (
    "No space left on device",
    "File too large",
    "Disk quota exceeded",
    "database or disk is full",
)


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        return True
    # SQLite and Arrow report a full disk in their own words, often without an errno
    return isinstance(exc, Exception) and any(w in str(exc) for w in DISK_FULL_WORDS)


def safe_name(value: str, what: str) -> str:
    """`value` if it can be one path component (a run id, an annotator id, a category);
    else a PrbError saying what is allowed. No separators, no `..`, not empty."""
    if not isinstance(value, str) or not SAFE_NAME.match(value) or ".." in value:
        raise PrbError(
            f"{what} {value!r} is not a safe name: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, with no '/' and no '..'"
        )
    return value


# Failure kinds of a model call (llm.LLMError.kind) that can be the endpoint's doing: retries
# ran out on 429/5xx/timeouts/refused connections, or the answer came back garbled, truncated
# or cut off at max_tokens. A record dropped for one of these is asked again when the run
# resumes; every other reason (a refusal, a bad request, an ungrounded plan) is settled.
TRANSIENT_KINDS = ("endpoint_error", "unparseable", "cut_off")


def is_transient(reason: str) -> bool:
    """`reason` is a drop reason such as `planner_unparseable` or `judge_endpoint_error`."""
    return reason.endswith(tuple(f"_{kind}" for kind in TRANSIENT_KINDS))
