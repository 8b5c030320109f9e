"""Content-addressed response cache on SQLite.

The key is a SHA-256 over a canonical JSON form (sorted keys) of model, messages, params, seed
and output schema — never an object's memory form — so a rerun repeats no call and a changed
prompt file invalidates only the entries of its own task.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from pipeline.errors import DiskFullError, PrbError, StorageError, is_disk_full

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    content TEXT NOT NULL,
    usage TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_task ON responses(task);
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""


def cache_key(*, model: str, messages: list[dict], params: dict, seed: int, schema: str) -> str:
    canon = json.dumps(
        {"model": model, "messages": messages, "params": params, "seed": seed, "schema": schema},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canon.encode()).hexdigest()


class ResponseCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as e:
            self._db.close()
            if is_disk_full(e):
                raise DiskFullError(self.path) from None
            raise PrbError(
                f"{self.path}: not a usable response cache ({e}); move it aside and rerun "
                "(the calls it held will be made again)"
            ) from None

    def get(self, key: str) -> tuple[str, dict] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT content, usage FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def put(self, key: str, *, task: str, model: str, request: dict, content: str, usage: dict):
        row = (key, task, model, json.dumps(request, sort_keys=True), content, json.dumps(usage))
        with self._lock:
            try:
                self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)
            except sqlite3.OperationalError as e:
                if is_disk_full(e):
                    raise DiskFullError(self.path) from None
                if "disk I/O error" in str(e):  # SQLite's word for a write the OS refused
                    raise StorageError(self.path) from None
                raise

    def delete(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM responses WHERE key = ?", (key,))

    def put_failure(self, key: str, kind: str, detail: str) -> None:
        """How a request last failed after its retries (cut off, unparseable, endpoint error):
        not an answer (a resume asks again), but what a replay (`model.replay`) reproduces."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO failures VALUES (?, ?, ?)", (key, kind, detail)
            )

    def failure(self, key: str) -> tuple[str, str] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT kind, detail FROM failures WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def lookup(self, key: str) -> dict | None:
        """The full entry (request and raw answer), for `prb show`."""
        with self._lock:
            row = self._db.execute(
                "SELECT task, model, request, content, usage FROM responses WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        task, model, request, content, usage = row
        return {
            "task": task,
            "model": model,
            "request": json.loads(request),
            "content": content,
            "usage": json.loads(usage),
        }

    def rows(self) -> list[dict]:
        """Every entry, by key: what a recorded build's fixture carries (tests/real_model/)."""
        with self._lock:
            found = self._db.execute(
                "SELECT key, task, model, request, content, usage FROM responses ORDER BY key"
            ).fetchall()
        return [
            {
                "key": k,
                "task": t,
                "model": m,
                "request": json.loads(r),
                "content": c,
                "usage": json.loads(u),
            }
            for k, t, m, r, c, u in found
        ]

    def add_rows(self, rows: list[dict]) -> None:
        """Put entries that `rows` gave (a replayed fixture), keys as they were."""
        for r in rows:
            self.put(
                r["key"],
                task=r["task"],
                model=r["model"],
                request=r["request"],
                content=r["content"],
                usage=r["usage"],
            )

    def failure_rows(self) -> list[dict]:
        with self._lock:
            found = self._db.execute(
                "SELECT key, kind, detail FROM failures ORDER BY key"
            ).fetchall()
        return [{"key": k, "kind": t, "detail": d} for k, t, d in found]

    def add_failure_rows(self, rows: list[dict]) -> None:
        for r in rows:
            self.put_failure(r["key"], r["kind"], r["detail"])

    def count(self, task: str | None = None) -> int:
        with self._lock:
            if task is None:
                return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            return self._db.execute(
                "SELECT COUNT(*) FROM responses WHERE task = ?", (task,)
            ).fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
