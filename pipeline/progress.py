"""Live progress of a build or an evaluation: what a user watches during hours of model calls.

Stages report records as they settle (`stage(...)`, `StageProgress.advance`), the call path
reports calls, cache hits, retries and tokens (the `LLM.usage` counters, read here), batch mode
reports each batch's status while polling. `showing(...)` renders it all: a rich live table in
a terminal, and in a log or CI at most one summary line every few seconds (stderr). Nothing of
this ever reaches an output file, so releases stay byte-identical.

With no display active (tests, library use) every call here is a cheap no-op.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pipeline.errors import PrbError

INTERVAL_ENV = "PRB_PROGRESS_SECONDS"  # seconds between summary lines outside a terminal
COUNTS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens")


def interval_from_env() -> float:
    """PRB_PROGRESS_SECONDS, checked: a number of seconds above 0 (5 when unset)."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    try:
        value = float(raw or 5)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise PrbError(f"{INTERVAL_ENV}={raw!r}: give the seconds between progress lines (e.g. 5)")
    return value


@dataclass
class StageProgress:
    name: str
    total: int | None  # records the stage will settle (None: not known up front)
    before: int = 0  # settled by an earlier run (resumed)
    done: int = 0  # settled in this run
    drops: Counter = field(default_factory=Counter)  # reason -> records
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    def advance(self, result: object = None) -> None:
        """One record settled; a Dropped (or a pair the filters dropped) counts its reasons."""
        self.done += 1
        reason = getattr(result, "reason", None)
        if isinstance(reason, str):
            self.drops[reason] += 1
        elif getattr(result, "kept", True) is False:
            self.drops.update(getattr(result, "reasons", ()))

    def finish(self) -> None:
        self.finished = time.monotonic()

    def eta(self, now: float, call_interval: float = 0.0) -> float | None:
        """Seconds left, from the pace so far; under rate limits that allow one call per
        `call_interval` seconds, never less than one call per record left at that pace."""
        if self.total is None or self.finished:
            return None
        left = self.total - self.before - self.done
        floor = left * call_interval
        if self.done == 0:
            return floor if call_interval else None
        return max(0.0, left * (now - self.started) / self.done, floor)


class Progress:
    def __init__(self, price: Callable[[str, dict], float | None] | None = None):
        self.stages: dict[str, StageProgress] = {}
        self.usage_sources: list[Callable[[], dict[str, dict]]] = []
        self.batches: dict[str, dict] = {}  # batch id -> {"status", "completed", "failed", ...}
        self.price = price  # (stage, usage) -> money so far, or None when unpriced
        self.started = time.monotonic()
        self.console: Console | None = None
        self.warned: set[str] = set()
        self.call_interval = 0.0  # seconds per call the rate limits impose (0: none)

    def usage(self) -> dict[str, dict]:
        merged: dict[str, dict] = {}
        for source in self.usage_sources:
            for stage, u in source().items():
                m = merged.setdefault(stage, {**dict.fromkeys(COUNTS, 0), "retries": Counter()})
                for k in COUNTS:
                    m[k] += u.get(k, 0)
                m["retries"].update(u.get("retries", {}))
        return merged

    # --- what a line or a table shows -----------------------------------------------------

    def rows(self) -> list[dict]:
        now, usage = time.monotonic(), self.usage()
        out = []
        for name, s in self.stages.items():
            u = usage.get(name, {})
            elapsed = (s.finished or now) - s.started
            cost = self.price(name, u) if (self.price and u) else None
            out.append(
                {
                    "stage": name,
                    "records": f"{s.before + s.done}/{s.total if s.total is not None else '?'}",
                    "calls": u.get("calls", 0),
                    "rate": u.get("calls", 0) / elapsed if elapsed > 0 else 0.0,
                    "cache_hits": u.get("cache_hits", 0),
                    "retries": dict(u.get("retries", {})),
                    "drops": dict(s.drops),
                    "tokens": u.get("prompt_tokens", 0) + u.get("completion_tokens", 0),
                    "cost": cost,
                    "elapsed": elapsed,
                    "eta": s.eta(now, self.call_interval),
                    "finished": s.finished is not None,
                }
            )
        return out

    def line(self) -> str:
        """One line: the stage in progress (else the last one), then the batches."""
        rows = self.rows()
        current = next((r for r in rows if not r["finished"]), None)
        head = f"[prb {_clock(time.monotonic() - self.started)}]"
        if current is None:  # between stages: a stage calling before its records (the judge's
            usage = self.usage()  # qualification) would leave the last stage's line frozen
            early = [(n, u) for n, u in usage.items() if n not in self.stages and u["calls"]]
            if early:
                name, u = early[-1]
                tokens = u["prompt_tokens"] + u["completion_tokens"]
                return f"{head} {name}: {u['calls']} calls, {tokens:,} tokens before its records"
            current = rows[-1] if rows else None
        if current is None:
            return f"{head} starting"
        r = current
        parts = [
            f"{r['stage']} {r['records']} records",
            f"{r['calls']} calls ({r['rate']:.1f}/s)",
            f"{r['cache_hits']} cache hits",
        ]
        if r["retries"]:
            parts.append("retries " + _counts(r["retries"]))
        if r["drops"]:
            parts.append("dropped " + _counts(r["drops"]))
        parts.append(f"{r['tokens']:,} tokens" + (f" ({_money(r['cost'])})" if r["cost"] else ""))
        parts.append(f"elapsed {_clock(r['elapsed'])}")
        if r["eta"] is not None:
            parts.append(f"ETA {_clock(r['eta'])}")
        line = f"{head} " + " · ".join(parts)
        if self.batches:
            line += " · batches " + "; ".join(_batch(b, s) for b, s in self.batches.items())
        return line

    def table(self) -> Group:
        t = Table(title=f"prb · {_clock(time.monotonic() - self.started)} elapsed", expand=False)
        for col in (
            "stage",
            "records",
            "calls",
            "calls/s",
            "cache hits",
            "retries",
            "dropped",
            "tokens",
            "cost",
            "elapsed",
            "ETA",
        ):
            t.add_column(col, justify="left" if col in ("stage", "retries", "dropped") else "right")
        for r in self.rows():
            t.add_row(
                r["stage"],
                r["records"],
                str(r["calls"]),
                f"{r['rate']:.1f}",
                str(r["cache_hits"]),
                _counts(r["retries"]) or "-",
                _counts(r["drops"]) or "-",
                f"{r['tokens']:,}",
                _money(r["cost"]) if r["cost"] is not None else "-",
                _clock(r["elapsed"]),
                "done" if r["finished"] else _clock(r["eta"]),
            )
        parts: list = [t]
        for b, s in self.batches.items():
            parts.append(Text(f"batch {b}: {_batch(b, s)}"))
        return Group(*parts)


def _counts(c: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def _money(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
        if s >= 3600
        else f"{s // 60:02d}:{s % 60:02d}"
    )


def _batch(batch_id: str, s: dict) -> str:
    counts = f"{s.get('completed', 0)}/{s.get('total', '?')} done, {s.get('failed', 0)} failed"
    return f"{batch_id} {s.get('status', '?')} ({counts})"


# --- the active progress (one per process: the CLI's) ------------------------------------------

_active: Progress | None = None


def stage(name: str, total: int | None = None, before: int = 0) -> StageProgress:
    """Start tracking a stage; without an active display the result is tracked by nobody."""
    s = StageProgress(name, total, before)
    if _active is not None:
        _active.stages[name] = s
    return s


def warn(message: str) -> None:
    """A line the user must see while a build or an evaluation runs (each once)."""
    if _active is None:
        logging.getLogger("prb").warning(message)
    elif message not in _active.warned and _active.console is not None:
        _active.warned.add(message)
        _active.console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)


def limited(seconds_per_call: float) -> None:
    """The rate limits allow at most one call per `seconds_per_call`: ETAs count with it."""
    if _active is not None:
        _active.call_interval = seconds_per_call


def watch_usage(source: Callable[[], dict[str, dict]]) -> None:
    """A callable giving per-stage call usage (an LLM's `usage_dict`)."""
    if _active is not None:
        _active.usage_sources.append(source)


def batch(batch_id: str, status: str, counts: object = None) -> None:
    """A Batch API job's status and request counts, as the last poll saw them."""
    if _active is not None:
        c = (
            {k: getattr(counts, k, None) for k in ("total", "completed", "failed")}
            if counts
            else {}
        )
        _active.batches[batch_id] = {
            "status": status,
            **{k: v for k, v in c.items() if v is not None},
        }


@contextlib.contextmanager
def _every(seconds: float, fn):
    """Call `fn` every `seconds` on a thread of its own while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            fn()

    thread = threading.Thread(target=loop, name="prb-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(2)


@contextlib.contextmanager
def showing(console: Console | None = None, price=None, interval: float | None = None):
    """Show live progress while the block runs: a table in a terminal, else a summary line on
    stderr at most every `interval` seconds (PRB_PROGRESS_SECONDS, default 5)."""
    global _active
    console = console or Console(stderr=True)
    progress = _active = Progress(price)
    progress.console = console
    interval = interval or interval_from_env()
    last: list[str] = [""]

    def report() -> None:
        line = progress.line()
        if line != last[0]:  # nothing new, nothing printed
            console.print(line, markup=False, highlight=False, soft_wrap=True)
            last[0] = line

    try:
        if console.is_terminal:
            live = Live(progress.table(), console=console, refresh_per_second=4, transient=True)
            with live, _every(0.25, lambda: live.update(progress.table())):
                yield progress
        else:
            with _every(interval, report):
                yield progress
    finally:
        _active = None
