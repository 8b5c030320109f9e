"""What a check is: one filter on a pair, declared whole in one module.

A `Check` names what it costs (judge calls per pair; 0 = model-free), the prompt tasks it calls,
its thresholds (its own pydantic `Settings`: those fields sit in the config's `filters:`
section), what it records per pair (its `Result`, stored at `FilterRecord.checks[name]`), its
decision rule, its card text, its part of the released `pair_checks` column and its figures in
the audit. The filters stage, the config, the card, the release schema and the audit are all
derived from the list of checks (pipeline/checks/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

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


@dataclass(frozen=True)
class Check:
    name: str
    settings: type[BaseModel]  # its thresholds: fields of the config's `filters:` section
    result: type[BaseModel]  # what it records per pair: FilterRecord.checks[name]
    decide: Callable[[Any, Any], list[str]]  # (result, settings) -> drop reasons, [] = pass
    about: str  # card: what its part of the `pair_checks` column holds
    docs: dict[str, str]  # card: each setting's rule, shown with its value
    features: dict[str, Any]  # release: its sub-fields of `pair_checks`, as dtype names
    released: Callable[[Any], dict]  # release: the values of those sub-fields for a result
    order: int = 100  # its place in the card, the `pair_checks` column and the reasons
    cost: int = 0  # judge calls per pair; model-free checks (0) run before any call
    tasks: tuple[str, ...] = ()  # prompt tasks it calls (in the build fingerprint and manifest)
    samples: dict[str, dict] = field(default_factory=dict)  # task -> variables (preflight)
    # its judge calls for a pair (and what `prepare` made, for a check that has one)
    calls: Callable[..., list[Call]] = _none
    call_names: tuple[str, ...] = ()  # the names those calls are recorded under, in order
    # (pair, answers by call name, what `prepare` made) -> result; a failed call is absent
    measure: Callable[[Pair, dict[str, CallResult], Any], BaseModel] | None = None
    prepare: Callable[[Iterable[Pair], Any], Any] | None = None  # one pass over all pairs
    enabled: Callable[[Any], bool] = lambda _: True  # settings -> runs at all (opt-in checks)
    # part of the model-free quality floor: it judges each answer's own text, so the judge's
    # calibration set (pipeline/qualification.py) takes its sound answers above it
    floor: bool = False
    flags: Callable[[Any], list[str]] = _none  # warnings recorded whether or not it drops
    # release: top-level columns it adds: name -> (dtype names, card text, value of a result)
    columns: dict[str, tuple[Any, str, Callable[[Any], Any]]] = field(default_factory=dict)
    # audit: its figures, and how far a pair is from "only personal fit" (the worst-pairs rank)
    figures: tuple[Figure, ...] = ()  # audit and compare: what it shows, in order
    severity: Callable[[Any], float] = lambda _: 0.0  # audit: ranks the worst pairs

    def view(self, result: Any) -> dict:
        """A result as the release holds it: its `pair_checks` sub-fields and its columns."""
        return self.released(result) | {c: fn(result) for c, (_, _, fn) in self.columns.items()}

    def row_view(self, row: dict) -> dict | None:
        """The same view of a released row (prb's or anyone's); None if it has none of it."""
        checks = row.get("pair_checks") if isinstance(row.get("pair_checks"), dict) else {}
        out = {k: checks.get(k) for k in self.features} | {c: row.get(c) for c in self.columns}
        return out if any(v is not None for v in out.values()) else None

    def read(self, record: FilterRecord) -> Any:
        """This check's result on a filtered pair, or None if it did not run (or failed)."""
        data = record.checks.get(self.name)
        return None if data is None else self.result.model_validate(data)
