"""Stage files: `outputs/<run_id>/<stage>.jsonl`, appended record by record, read back on resume.

A line is written whole and flushed before the next record starts, so a crash can at worst tear
the last line; `read` detects a torn tail, says so, and cuts it off before anything appends.
Files that are produced in one go (deterministic stages, releases) go through `atomic_write`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pipeline.errors import DiskFullError, PrbError, is_disk_full, is_transient
from pipeline.records import Dropped


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes (release files, persona files, model weights)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


log = logging.getLogger("prb.store")
M = TypeVar("M", bound=BaseModel)


class StageFileError(PrbError, ValueError):
    pass


@contextmanager
def disk_full_names(path: Path):
    """A write that fails for lack of space says which file it was writing."""
    try:
        yield
    except OSError as e:
        if is_disk_full(e):
            raise DiskFullError(path) from None
        raise


def dumps(record: BaseModel) -> str:
    return json.dumps(record.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_write(path: Path, mode: str = "w"):
    """Write to a temp file beside `path`, fsync, then rename into place."""
    with disk_full_names(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        try:
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class StageFile:
    def __init__(self, run_dir: Path, stage: str, model: type[M]):
        self.path = Path(run_dir) / f"{stage}.jsonl"
        self.stage = stage
        self.model = model

    def exists(self) -> bool:
        return self.path.exists()

    def _repair_tail(self) -> None:
        """Cut off a torn last line (no newline at the end) left by a crash."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            data = self.path.read_bytes()
            keep = data.rfind(b"\n") + 1
            log.warning(
                "%s: dropped a torn last line (%d bytes) left by an interrupted run",
                self.path,
                size - keep,
            )
            f.truncate(keep)

    def _lines(self) -> Iterator[tuple[int, int, bytes]]:
        """(line number, byte offset, line) of every non-blank line, a torn tail cut off first."""
        self._repair_tail()
        if not self.path.exists():
            return
        offset = 0
        with open(self.path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield lineno, offset, line
                offset += len(line)

    def _parse(self, where: str, line: bytes) -> M:
        try:
            return self.model.model_validate_json(line)
        except ValidationError as e:
            raise StageFileError(
                f"{self.path}{where}: not a valid {self.model.__name__}: {str(e).splitlines()[0]}"
            ) from None

    def read(self) -> Iterator[M]:
        for lineno, _, line in self._lines():
            yield self._parse(f":{lineno}", line)

    def latest_offsets(self, key) -> dict:
        """key -> byte offset of the last line written for it (a retried record supersedes its
        earlier line). Holds keys and numbers, never records."""
        return {key(self._parse(f":{n}", line)): offset for n, offset, line in self._lines()}

    def values(self, field: str) -> Iterator:
        """One top-level field of every line, in file order, without building records (the
        ids of 50,000 Tasks in a blink, where validating them whole costs seconds)."""
        for _, _, line in self._lines():
            yield json.loads(line)[field]

    def read_at(self, offsets: Iterable[int]) -> Iterator[M]:
        """The records starting at `offsets`, in the order given."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for offset in offsets:
                f.seek(offset)
                yield self._parse(f" (byte {offset})", f.readline())

    def write_all(self, records: Iterable[BaseModel]) -> int:
        n = 0
        with atomic_write(self.path) as f:
            for r in records:
                f.write(dumps(r) + "\n")
                n += 1
        return n

    @contextmanager
    def appender(self):
        self._repair_tail()
        with disk_full_names(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:

                def append(record: BaseModel) -> None:
                    f.write(dumps(record) + "\n")
                    f.flush()

                yield append
                os.fsync(f.fileno())

    def count(self) -> int:
        return sum(1 for _ in self.read())


def dropped_file(run_dir: Path) -> StageFile:
    return StageFile(run_dir, "dropped", Dropped)


def latest(records: Iterable[M], key) -> list[M]:
    """The last record written for each key: a retried record supersedes its earlier line."""
    by_key: dict = {}
    for r in records:
        by_key[key(r)] = r
    return list(by_key.values())


class Records:
    """The latest record per key of a stage file, only keys in `wanted` if given: what one
    stage hands the next. It is read from disk on each pass (in file order) and never held in
    memory, so a stage of 50,000 records costs the next stage an index of ids and offsets.
    Iterable more than once, picklable (for shard tasks), opaque to Prefect's parameter walk."""

    def __init__(self, file: StageFile, key, wanted: Iterable | None = None):
        self.file, self.key = file, key
        self.wanted = None if wanted is None else frozenset(wanted)
        self._index: dict | None = None

    def index(self) -> dict:
        """key -> offset of its latest line, in file order; read once (the stage is finished)."""
        if self._index is None:
            found = self.file.latest_offsets(self.key)
            if self.wanted is not None:
                found = {k: o for k, o in found.items() if k in self.wanted}
            self._index = dict(sorted(found.items(), key=lambda kv: kv[1]))
        return self._index

    def subset(self, wanted: Iterable) -> Records:
        """The same file restricted to `wanted`, reusing this index (no re-read)."""
        part = Records(self.file, self.key, wanted)
        part._index = {k: o for k, o in self.index().items() if k in part.wanted}
        return part

    def items(self) -> Iterator[tuple[int, M]]:
        """(offset, record) in file order; an offset reads the record back with `read_at`."""
        offsets = self.index().values()
        return zip(offsets, self.file.read_at(offsets), strict=True)

    def __iter__(self) -> Iterator[M]:
        return (r for _, r in self.items())

    def sorted_by(self, key) -> Iterator[M]:
        """The records in the order of `key(record)`, read back one at a time: what
        sorted(records, key=key) gives without holding them (50,000 pairs: 0.85 GiB)."""
        order = sorted((key(r), offset) for offset, r in self.items())
        return self.file.read_at(offset for _, offset in order)

    def __len__(self) -> int:
        return len(self.index())

    def __repr__(self) -> str:  # Prefect logs task parameters by repr
        n = "all" if self.wanted is None else len(self.wanted)
        return f"Records({self.file.path}, wanted={n})"


def settled_ids(stage: str, out: StageFile, output_id, run_dir: Path, unsettled=None) -> set:
    """Ids the stage need not process again: written as output (unless `unsettled` says the
    output itself records a transient failure) or dropped for a lasting reason."""
    settled: dict = {}
    for r in out.read():  # the last line per id decides
        settled[output_id(r)] = not (unsettled and unsettled(r))
    done = {k for k, ok in settled.items() if ok}
    drops = latest(dropped_file(run_dir).read(), lambda d: (d.stage, d.id))
    return done | {d.id for d in drops if d.stage == stage and not is_transient(d.reason)}


def current_drops(run_dir: Path, produced: dict[str, set]) -> list[Dropped]:
    """Each record's latest drop, unless a resumed run has since produced it."""
    drops = latest(dropped_file(run_dir).read(), lambda d: (d.stage, d.id))
    return [d for d in drops if d.id not in produced.get(d.stage, ())]
