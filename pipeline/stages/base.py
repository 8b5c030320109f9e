"""What a stage is, what it runs with, and the executor the model stages share.

A `Stage` declares its name, input and output record types, how records are identified, the
prompt tasks it uses and the call names it records, its model role (model stages run
concurrently over their records, and may run as shards), what a resume may ask again, and its
row in the funnel with the card's words for it. `run(ctx, previous)` takes the previous stage's
output (a `store.Records` view of its stage file, or nothing for the first stage) and returns
a `StageReport`: its own output and what it did (records passed on, lost by reason, changed,
the ids it produced, the cache keys it used). The flow assembles the funnel, the manifest's
counts and run_stats from the reports; a stage reads the earlier ones through `RunContext`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pipeline import progress
from pipeline.errors import PrbError
from pipeline.records import Dropped
from pipeline.store import Records, StageFile, current_drops, dropped_file, settled_ids

if TYPE_CHECKING:
    from pipeline.config import RunConfig
    from pipeline.llm.cache import ResponseCache
    from pipeline.llm.client import LLM


@dataclass
class StageReport:
    """What one stage did, as it returns it: `output` (what it hands on), `kept` (its funnel
    row), what it lost by reason (None: its records in dropped.jsonl say), what it changed and
    how often, an error behind a reason, the ids it produced and the cache keys of the answers
    they used (the manifest's tokens and cost)."""

    output: Any
    kept: int
    lost: Counter | None = None
    changed: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    produced: set[str] | None = None  # None: a stage that makes no model records
    keys: list[str] | None = None


class RunContext:
    """One build: its settings, model client and readers: the outputs and reports of the
    stages that ran, which only the flow writes.

    A plain class on purpose: Prefect walks dataclass and pydantic task parameters looking for
    futures, and this one holds whole stages' worth of results."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        llm: LLM | None = None,
        cache: ResponseCache | None = None,
        *,
        shards: int = 0,
        stages: tuple = (),
        shard: bool = False,
    ):
        self.cfg, self.run_dir, self.llm, self.cache = cfg, Path(run_dir), llm, cache
        self.shard = shard  # one shard of a stage (run/shards.py): the stage's `before` is done
        self.shards = shards  # > 0: model stages run as that many shard tasks (run/shards.py)
        self.stages = stages  # the registry the flow runs (a stage reads it here, never imports it)
        self.reports: dict[str, StageReport] = {}  # stage name -> its report, in run order
        self.outputs: dict[type, Any] = {}  # record type -> the latest stage output of it
        self.seconds: dict[str, float] = {}  # a stage's part (the gate, a floor check) -> time

    def _rows(self):
        for s in self.stages:
            if s.name in self.reports:
                yield s, self.reports[s.name]

    @property
    def funnel(self) -> dict[str, int]:
        """funnel row -> records each stage passed on."""
        return {s.funnel: r.kept for s, r in self._rows()}

    @property
    def lost(self) -> dict[str, Counter]:
        """funnel row -> why records were lost, for the stages that counted their own."""
        return {s.funnel: r.lost for s, r in self._rows() if r.lost is not None}

    @property
    def changed(self) -> dict[str, dict[str, int]]:
        return {s.funnel: r.changed for s, r in self._rows() if r.changed}

    @property
    def examples(self) -> dict[str, str]:
        return {k: v for _, r in self._rows() for k, v in r.examples.items()}

    @property
    def produced(self) -> dict[str, set[str]]:
        return {s.name: r.produced for s, r in self._rows() if r.produced is not None}

    @property
    def keys(self) -> dict[str, list[str]]:
        return {s.name: r.keys for s, r in self._rows() if r.keys is not None}

    def read(self, record_type: type[BaseModel]) -> Any:
        """What the latest stage that writes `record_type` handed on (a stage declares it in
        `reads`; the flow checked that one ran)."""
        return self.outputs[record_type]

    def __repr__(self) -> str:  # Prefect logs task parameters by repr
        return f"RunContext({self.cfg.run_id!r}, {self.run_dir})"


def _none(_: object) -> bool:
    return False


@dataclass(frozen=True)
class Stage:
    name: str
    # the record type it writes (its stage file); None: it writes no stage file (the release)
    output: type[BaseModel] | None
    run: Callable[[RunContext, Any], Awaitable[Any]]
    funnel: str  # its row in the funnel (card, manifest, audit)
    about: str  # the card's words for that row; may use {seed} {per_category} {budget} {required}
    # the record types it reads, each from the latest earlier stage that writes it: the first
    # is `run`'s second argument, the others `ctx.read(Type)`; the flow refuses a stage whose
    # reads no earlier stage writes
    reads: tuple[type[BaseModel], ...] = ()
    after: str | None = None  # a plugin stage: the stage it runs after (built-ins: list order)
    input_id: Callable[[Any], str] | None = None
    output_id: Callable[[Any], str] | None = None
    tasks: tuple[str, ...] = ()  # prompt tasks it calls
    calls: tuple[str, ...] = ()  # names of the calls it records on its records, in order
    role: str | None = None  # "generator" or "judge": a model stage, billed to that model
    unsettled: Callable[[Any], bool] = _none  # an output record that a resume asks again
    samples: dict[str, dict] = field(default_factory=dict)  # task -> variables (preflight)
    # the prompt tasks a config makes it call, with their samples, when that depends on the
    # config (a recipe's prompt files; no planner for imported aspects); default: all of them
    configured: Callable[[Any], dict[str, dict]] | None = None
    # when it passes nothing on: what to do (may use {run_id}); else the cause's own hint
    empty_hint: str = ""
    # a run-level step over all its inputs before any record is processed, sharded or not
    # (filters: the judge's qualification); a shard does not repeat it
    before: Callable[[RunContext, Any], Awaitable[Any]] | None = None
    # what of a config only this stage can judge, checked before the run's first model call
    # (its persona source, its retriever, its strategies table); raises PrbError
    preflight: Callable[[Any], None] | None = None

    def prompts(self, cfg=None) -> dict[str, dict]:
        """task -> preflight sample variables, for this config if given."""
        if cfg is not None and self.configured is not None:
            return self.configured(cfg)
        return {t: self.samples.get(t, {}) for t in self.tasks}

    def file(self, run_dir: Path) -> StageFile:
        return StageFile(run_dir, self.name, self.output)

    def outputs(self, run_dir: Path, inputs: Records) -> Records:
        """The stage file's latest record for each of `inputs` (a record and its input share
        an id): read from disk by whoever uses it, so no stage is ever held whole in memory."""
        wanted = {self.input_id(x) for x in inputs}
        return Records(self.file(run_dir), self.output_id, wanted)


class StageOrderError(PrbError):
    """A stage reads a record type no earlier stage writes."""


def assemble(stages: Iterable[Stage]) -> tuple[Stage, ...]:
    """The flow's stages in order: built-ins as listed, a plugin's after the stage it names;
    refused in one line if a stage reads what no earlier stage writes."""
    order: list[Stage] = []
    for s in stages:
        if s.after is None:
            order.append(s)
        else:
            at = next((i for i, x in enumerate(order) if x.name == s.after), None)
            if at is None:
                raise StageOrderError(f"stage {s.name!r} runs after {s.after!r}: no such stage")
            order.insert(at + 1, s)
    written: set[type] = set()
    for s in order:
        missing = [t.__name__ for t in s.reads if t not in written]
        if missing:
            earlier = " -> ".join(x.name for x in order[: order.index(s)]) or "none"
            raise StageOrderError(
                f"stage {s.name!r} reads {', '.join(missing)}, which no earlier stage writes "
                f"(stages before it: {earlier}): move it after a stage that writes it"
            )
        if s.output is not None:
            written.add(s.output)
    return tuple(order)


def prompt_tasks(stages: tuple[Stage, ...], cfg=None) -> tuple[str, ...]:
    """Every prompt task the stages use (the filters stage's are its checks'); with a config,
    those that config uses."""
    return tuple(dict.fromkeys(t for s in stages for t in s.prompts(cfg)))


def roles(stages: tuple[Stage, ...]) -> dict[str, str]:
    """Model stage -> the model role its calls are billed to."""
    return {s.name: s.role for s in stages if s.role}


RECORDS_IN_FLIGHT = 256  # enough to keep the call path's semaphore full at any sane concurrency


async def process_stage(
    stage: Stage, inputs: Iterable, run_dir: Path, fn: Callable[[Any], Awaitable[Any]]
) -> dict[str, int]:
    """Run async `fn` over the inputs not yet settled, appending each result as it completes.

    `fn` returns an output record or a `Dropped`; either way the record is written down, so a
    resumed run neither redoes nor loses it (transient failures excepted: they are asked again,
    and the new line supersedes the old). A permanent error propagates and cancels the rest.
    """
    out = stage.file(run_dir)
    done = settled_ids(stage.name, out, stage.output_id, run_dir, stage.unsettled)
    shown = progress.stage(stage.name, total=len(inputs) if hasattr(inputs, "__len__") else None)

    def todo(x) -> bool:
        if stage.input_id(x) in done:
            shown.before += 1
            return False
        return True

    records = (x for x in inputs if todo(x))  # streamed: `inputs` may be Records
    counts = {"done_before": len(done), "new": 0, "dropped": 0}
    with out.appender() as append, dropped_file(run_dir).appender() as append_drop:

        async def worker() -> None:
            for x in records:  # workers share the iterator: each takes the next record
                result = await fn(x)
                if isinstance(result, Dropped):
                    append_drop(result)
                    counts["dropped"] += 1
                else:
                    append(result)
                    counts["new"] += 1
                shown.advance(result)

        try:
            # a bounded pool of workers, not a task per record: a record's pending calls hold
            # their rendered prompts, so starting them all at once grows memory with the stage
            async with asyncio.TaskGroup() as tg:
                for _ in range(RECORDS_IN_FLIGHT):
                    tg.create_task(worker())
        except BaseExceptionGroup as group:
            # the first failure (e.g. a bad key) cancelled the rest: raise it plainly, so the
            # run stops with its own message rather than a group of identical ones
            first = group.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        finally:
            shown.finish()
    return counts


def model_stage_done(stage: Stage, ctx: RunContext, inputs: Records) -> StageReport:
    """A model stage's report: its outputs for `inputs`, the ids it produced and the cache
    keys of the answers they used (the manifest's tokens), read in one pass, and what it lost
    by reason (its latest drops of records it has not since produced)."""
    outputs = stage.outputs(ctx.run_dir, inputs)
    ids: set[str] = set()
    keys: list[str] = []
    for r in outputs:
        ids.add(stage.output_id(r))
        keys.extend(r.calls.values())
    drops = current_drops(ctx.run_dir, {stage.name: ids})
    lost = Counter(d.reason for d in drops if d.stage == stage.name) or None
    return StageReport(outputs, len(ids), lost=lost, produced=ids, keys=keys)
