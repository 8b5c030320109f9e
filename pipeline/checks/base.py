"""What a check is: a rule on a pair and a report of what it measured, in one module.

The rule (`Check`) has its thresholds (its own pydantic `settings`: those fields sit in the
config's `filters:` section), the judge calls it makes for a pair (`asks`: their names, prompt
tasks and cost follow from them; none for a model-free check), what it records per pair (its
`result` model, stored at `FilterRecord.checks[name]`) and its decision. The `Report` has its
card text, its top-level release columns and its figures in the audit. Its part of the released
`pair_checks` column is read off the result model: each field marked `Released` (its dtype from
its type) and each value marked `@released`. The filters stage, the config, the card, the
release schema and the audit are all derived from the list of checks
(pipeline/checks/__init__.py).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

if TYPE_CHECKING:
    from pipeline.calls import CallResult
    from pipeline.records import FilterRecord, Pair


@dataclass(frozen=True)
class Call:
    """One judge call a check makes for a pair: `name` keys its answer in the record."""

    name: str
    task: str
    variables: dict


@dataclass(frozen=True)
class Ask:
    """One judge call a check declares: `variables(pair, prepared)` fills prompt `task` for a
    pair (`prepared`: what the check's `prepare` made, or None); None: not asked of this pair."""

    name: str
    task: str
    variables: Callable[[Pair, Any], dict | None]


def shown(pair: Pair, order: str) -> dict[str, str]:
    """A pairwise prompt's two answers: `ab` shows chosen as A, `ba` shows it as B."""
    a, b = (pair.chosen, pair.rejected) if order == "ab" else (pair.rejected, pair.chosen)
    return {"answer_a": a, "answer_b": b}


@dataclass(frozen=True)
class Released:
    """A result field released as a sub-field of `pair_checks`:
    `chosen: Annotated[float | None, Released("adherence_chosen")] = None`. `name`: the released
    name (default: the field's), `dtype`: a `datasets` dtype name (default: from its type)."""

    name: str | None = None
    dtype: str | None = None


class _ReleasedValue(property):
    def __init__(self, fget: Callable, dtype: str):
        super().__init__(fget)
        self.dtype = dtype


def released(dtype: str, fget: Callable | None = None) -> Any:
    """A value of the result released in `pair_checks` but not stored in the filter records: a
    property named as released, computed from the fields: `@released("bool")` on a method, or
    `chosen_words = released("int32", lambda r: r.chosen.words)`."""
    return _ReleasedValue(fget, dtype) if fget else lambda fget: _ReleasedValue(fget, dtype)


_DTYPES = {float: "float64", int: "int32", str: "string", bool: "bool"}


def _dtype(model: type[BaseModel], name: str, annotation: Any) -> str:
    kinds = [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        kinds = [a for a in get_args(annotation) if a is not type(None)]
    if len(kinds) == 1 and get_origin(kinds[0]) is Literal:
        kinds = list({type(v) for v in get_args(kinds[0])})
    if len(kinds) == 1 and kinds[0] in _DTYPES:
        return _DTYPES[kinds[0]]
    raise TypeError(f"{model.__name__}.{name}: give Released(dtype=...) for {annotation!r}")


def release_fields(model: type[BaseModel]) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """A result model's released sub-fields: name -> (dtype, its value of a result), the marked
    fields in their order, then the `@released` values in theirs."""
    out = {}
    for name, info in model.model_fields.items():
        for mark in (m for m in info.metadata if isinstance(m, Released)):
            dtype = mark.dtype or _dtype(model, name, info.annotation)
            out[mark.name or name] = (dtype, lambda r, name=name: getattr(r, name))
    for klass in reversed(model.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, _ReleasedValue):
                out[name] = (value.dtype, value.fget)
    return out


def _none(*_: object) -> list:
    return []


@dataclass(frozen=True)
class Figure:
    """One number the audit and `prb compare` show for a check. It reads a pair as released
    (the check's `pair_checks` sub-fields and top-level columns: `Check.view`), so the same
    reader serves a prb run and any release that carries those columns.

    summary: how pairs add up. `mean`/`median` of a number per pair; `share`: the pair gives
    (successes, trials) and the figure is their ratio with a Wilson interval; `sides`: the pair
    gives (chosen, rejected) and each side is averaged (plotted as twin histograms)."""

    key: str
    label: str
    value: Callable[[dict], Any]  # the pair's view -> its number (None: not measured)
    summary: Literal["mean", "median", "share", "sides"] = "mean"
    fmt: str = "{:.3f}"
    # where the figure should lie: a summary (or, for `share`, its whole interval) outside it is
    # a warning, with `warning` saying why it matters
    expect: tuple[float, float] | None = None
    warning: str = ""
    plot: bool = True  # a panel in the check's plot (not for `share`)
    breakdown: bool = False  # a column of the per-strategy and per-category tables
    span: tuple[float, float] | None = None  # the plot's x range (None: the data's)
    lines: Callable[[Any], tuple[float, ...]] = lambda _: ()  # settings -> thresholds drawn


def both(chosen: str, rejected: str) -> Callable[[dict], tuple | None]:
    """A `sides` figure's reader: the two answers' released values (None: either is missing)."""

    def value(view: dict) -> tuple | None:
        found = view.get(chosen), view.get(rejected)
        return None if None in found else found

    return value


@dataclass(frozen=True)
class Report:
    """What a check shows of its results: the card, the release's columns, the audit."""

    about: str = ""  # card: what its part of the `pair_checks` column holds
    docs: dict[str, str] = field(default_factory=dict)  # card: each setting's rule
    # release: top-level columns it adds: name -> (dtype names, card text, value of a result)
    columns: dict[str, tuple[Any, str, Callable[[Any], Any]]] = field(default_factory=dict)
    figures: tuple[Figure, ...] = ()  # audit and compare: what it shows, in order
    severity: Callable[[Any], float] = lambda _: 0.0  # audit: ranks the worst pairs


@dataclass(frozen=True)
class Check:
    name: str
    settings: type[BaseModel]  # its thresholds: fields of the config's `filters:` section
    result: type[BaseModel]  # what it records per pair: FilterRecord.checks[name]
    # (pair, answers by ask name, what `prepare` made) -> result; a failed call is absent
    measure: Callable[[Pair, dict[str, CallResult], Any], BaseModel | None]
    decide: Callable[[Any, Any], list[str]]  # (result, settings) -> drop reasons, [] = pass
    report: Report
    asks: tuple[Ask, ...] = ()  # its judge calls per pair; none: model-free, run before any
    samples: dict[str, dict] = field(default_factory=dict)  # task -> variables (preflight)
    order: int = 100  # its place in the card, the `pair_checks` column and the reasons
    prepare: Callable[[Iterable[Pair], Any], Any] | None = None  # one pass over all pairs
    enabled: Callable[[Any], bool] = lambda _: True  # settings -> runs at all (opt-in checks)
    # part of the model-free quality floor: it judges each answer's own text, so the judge's
    # calibration set (pipeline/qualification.py) takes its sound answers above it
    floor: bool = False
    flags: Callable[[Any], list[str]] = _none  # warnings recorded whether or not it drops

    def __post_init__(self) -> None:
        # fails when the check is loaded (the registry's one warning line for a plugin)
        found = release_fields(self.result)
        object.__setattr__(self, "_released", found)
        object.__setattr__(self, "_features", {name: dtype for name, (dtype, _) in found.items()})

    @property
    def cost(self) -> int:
        """Judge calls per pair (0: model-free)."""
        return len(self.asks)

    @property
    def tasks(self) -> tuple[str, ...]:
        """The prompt tasks it calls (in the build fingerprint and the manifest)."""
        return tuple(dict.fromkeys(a.task for a in self.asks))

    @property
    def call_names(self) -> tuple[str, ...]:
        """The names its calls are recorded under, in order."""
        return tuple(a.name for a in self.asks)

    @property
    def features(self) -> dict[str, Any]:
        """Its sub-fields of the released `pair_checks` column, as dtype names."""
        return self._features  # read once per released row: made once

    def calls(self, pair: Pair, prepared: Any = None) -> list[Call]:
        """Its judge calls for a pair."""
        found = ((a, a.variables(pair, prepared)) for a in self.asks)
        return [Call(a.name, a.task, v) for a, v in found if v is not None]

    def released(self, result: Any) -> dict:
        """Its `pair_checks` sub-fields of a result."""
        return {name: value(result) for name, (_, value) in self._released.items()}

    def view(self, result: Any) -> dict:
        """A result as the release holds it: its `pair_checks` sub-fields and its columns."""
        columns = self.report.columns
        return self.released(result) | {c: fn(result) for c, (_, _, fn) in columns.items()}

    def row_view(self, row: dict) -> dict | None:
        """The same view of a released row (prb's or anyone's); None if it has none of it."""
        checks = row.get("pair_checks") if isinstance(row.get("pair_checks"), dict) else {}
        out = {k: checks.get(k) for k in self.features}
        out |= {c: row.get(c) for c in self.report.columns}
        return out if any(v is not None for v in out.values()) else None

    def read(self, record: FilterRecord) -> Any:
        """This check's result on a filtered pair, or None if it did not run (or failed)."""
        data = record.checks.get(self.name)
        return None if data is None else self.result.model_validate(data)
