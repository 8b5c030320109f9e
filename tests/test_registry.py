"""One `Registry[T]` (issue 40): lazy references, a type check on load, clashes refused, a
failing plugin isolated to one warning line (issue 38), and a stage list checked against what
each stage reads and writes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest
from conftest import prefect_env
from public_releases import controlled

from pipeline.registry import Registry, RegistryError


class Thing:
    def __init__(self, name: str):
        self.name = name


def with_plugins(monkeypatch, registry: Registry, **eps: str) -> Registry:
    """The registry with these entry points (name -> "module:attr") as its plugins."""
    found = [EntryPoint(n, v, registry.group) for n, v in eps.items()]
    monkeypatch.setattr(
        "pipeline.registry.entry_points", lambda group: [e for e in found if e.group == group]
    )
    return registry


def test_a_reference_loads_on_first_use_and_is_type_checked():
    r = Registry("things", Thing, {"a": Thing("a"), "mod": "pipeline.errors:PrbError"})
    assert r.names() == ["a", "mod"] and r.get("a").name == "a"
    with pytest.raises(RegistryError, match=r"things 'mod' .* not a Thing"):
        r.get("mod")


def test_a_name_registered_twice_is_refused():
    r = Registry("things", Thing, {"a": Thing("a")})
    with pytest.raises(RegistryError, match="registered twice"):
        r.register("a")(Thing("a"))
    r.register("b")(Thing("b"))
    assert [t.name for t in r] == ["a", "b"]


def test_an_entry_must_carry_its_own_name_when_named():
    r = Registry("things", Thing, {"a": Thing("b")}, named=True)
    with pytest.raises(RegistryError, match="calls itself 'b'"):
        r.get("a")


def test_a_failing_or_clashing_plugin_is_one_warning_and_the_rest_works(caplog, monkeypatch):
    r = Registry("things", Thing, {"a": Thing("a")})
    with caplog.at_level(logging.WARNING, logger="prb"):
        with_plugins(monkeypatch, r, a="pipeline.errors:PrbError", broken="no_such_module_xyz:T")
        assert r.names() == ["a", "broken"]  # the clash is gone, with a warning
        assert [t.name for t in r] == ["a"]  # the broken one: a warning, then gone
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 2, lines
    assert "named like a things prb already has ('a')" in lines[0]
    assert "broken = no_such_module_xyz:T" in lines[1] and "\n" not in lines[1]
    assert "broken" not in r.names() and "broken" in r  # named, it says why it failed:
    with pytest.raises(RegistryError, match="plugin failed to load: entry point broken"):
        r.get("broken")


def test_a_broken_plugin_costs_prb_one_warning_line(tmp_path):
    """A check plugin raising at import, a reward model naming a missing attribute, a probe of
    the wrong type and a reward model named like a built-in: `prb --help` and `prb eval --rm
    length` still work, each broken one is one line naming its entry point."""
    site = tmp_path / "site"
    dist = site / "prb_broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: prb-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[prb.checks]\nexploding = prb_broken:CHECK\n\n"
        "[prb.reward_models]\nmissing = prb_broken:NOT_THERE\nlength = prb_broken:KIND\n\n"
        "[prb.probes]\nwrong = prb_broken:WRONG\n"
    )
    (site / "prb_broken.py").write_text(
        "import os\nif os.environ.get('EXPLODE'):\n    raise RuntimeError('boom at import')\n"
        "WRONG = 42\nKIND = None\n"
    )
    env = prefect_env(PYTHONPATH=str(site), EXPLODE="1")

    def prb(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    helped = prb("--help")
    assert helped.returncode == 0 and "Traceback" not in helped.stderr, helped.stderr
    # the checks make the config's `filters:` section, so they load with it: one line
    warned = [line for line in helped.stderr.splitlines() if "prb_broken" in line]
    assert len(warned) == 1 and "exploding = prb_broken:CHECK" in warned[0], helped.stderr
    assert "RuntimeError: boom at import" in warned[0]
    evaled = prb("eval", "score", "--help")
    assert evaled.returncode == 0 and "Traceback" not in evaled.stderr
    warned = [line for line in evaled.stderr.splitlines() if "prb_broken:" in line]
    warned = [w for w in warned if "exploding" not in w]
    assert len(warned) == 2, evaled.stderr  # `missing` failed, `length` clashed: a line each
    assert any("missing = prb_broken:NOT_THERE" in w and "prb-broken" in w for w in warned)
    assert any("named like a reward_models prb already has ('length')" in w for w in warned)
    release = tmp_path / "r.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in controlled()))
    audited = prb("audit", str(release), "--out", str(tmp_path / "audit"))
    assert audited.returncode == 0, audited.stderr[-2000:]
    assert "Traceback" not in audited.stderr
    assert any("wrong = prb_broken:WRONG" in line for line in audited.stderr.splitlines())


def test_a_stage_reading_what_no_earlier_stage_writes_is_refused():
    from pipeline.stages import stage
    from pipeline.stages.base import StageOrderError, assemble

    order = ["personas", "questions", "rubrics", "pairs", "filters", "annotation", "release"]
    assert [s.name for s in assemble(stage(n) for n in order)] == order
    swapped = ["personas", "questions", "pairs", "rubrics", "filters", "annotation", "release"]
    with pytest.raises(StageOrderError) as e:
        assemble(stage(n) for n in swapped)
    assert str(e.value).startswith("stage 'pairs' reads RubricRecord, which no earlier stage")
    without_filters = [n for n in order if n != "filters"]
    with pytest.raises(StageOrderError, match="'annotation' reads FilterRecord"):
        assemble(stage(n) for n in without_filters)


# --- a plugin check cannot rewrite a release (issue 48) -----------------------------------------


def _plugin_check(name: str, setting: str = "", field: str = "", column: str = ""):
    """A model-free check declaring the given setting, pair_checks field and column."""
    from typing import Annotated

    from pydantic import create_model

    from pipeline.checks.base import Check, Released, Report
    from pipeline.records import Record

    declared = {setting: (float, 1000.0)} if setting else {}
    settings = create_model(f"S{name}", __base__=Record, **declared)
    result = create_model(
        f"R{name}",
        __base__=Record,
        **({"x": (Annotated[float, Released(field)], 42.0)} if field else {}),
    )
    columns = {column: ("string", "a column", lambda r: "PWNED by plugin")} if column else {}
    return Check(
        name=name,
        settings=settings,
        result=result,
        measure=lambda pair, _, __: result(),
        decide=lambda r, s: [],
        report=Report(columns=columns),
    )


SETS_LENGTH = _plugin_check("sets_length", setting="max_length_ratio")
RELEASES_RATIO = _plugin_check("releases_ratio", field="length_ratio")
WRITES_CHOSEN = _plugin_check("writes_chosen", column="chosen")
ADDS_ITS_OWN = _plugin_check("adds_its_own", setting="max_loud", field="loudness", column="loud")


def test_a_plugin_check_claiming_a_bundled_setting_field_or_column_is_refused(caplog, monkeypatch):
    """A check plugin released `length_ratio` over the bundled one (42.0 on every row), loosened
    `max_length_ratio` to 1000, or replaced every `chosen` answer: each is now refused at load
    with one line, and a plugin that only adds is kept."""
    from pipeline.checks import _RESERVED, claims
    from pipeline.checks.base import Check

    r = Registry(
        "checks",
        Check,
        package="pipeline.checks",
        attr="CHECK",
        named=True,
        claims=claims,
        reserved=_RESERVED,
    )
    plugins = {
        n: f"test_registry:{v}"
        for n, v in [
            ("sets_length", "SETS_LENGTH"),
            ("releases_ratio", "RELEASES_RATIO"),
            ("writes_chosen", "WRITES_CHOSEN"),
            ("adds_its_own", "ADDS_ITS_OWN"),
        ]
    }
    with caplog.at_level(logging.WARNING, logger="prb"):
        with_plugins(monkeypatch, r, **plugins)
        loaded = [c.name for c in r]
    assert "adds_its_own" in loaded and "length_ratio" in loaded
    assert not {"sets_length", "releases_ratio", "writes_chosen"} & set(loaded)
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 3 and all("\n" not in x for x in lines), lines
    said = "\n".join(lines)
    assert "setting 'max_length_ratio', which prb's checks entry 'length_ratio' holds" in said
    assert "pair_checks field 'length_ratio', which prb's checks entry 'length_ratio'" in said
    assert "column 'chosen', which the release schema holds" in said


def test_an_unknown_name_lists_the_known_ones_and_the_closest():
    """`Registry.get` of an unknown name was a bare KeyError (issue 49)."""
    from pipeline.registry import UnknownName

    r = Registry("things", Thing, {"length_ratio": Thing("length_ratio"), "other": Thing("o")})
    with pytest.raises(UnknownName) as e:
        r.get("lenght_ratio")
    assert str(e.value) == (
        "unknown things 'lenght_ratio' (did you mean 'length_ratio'?); known: length_ratio, other"
    )
    assert isinstance(e.value, KeyError)  # what callers that catch KeyError still catch
