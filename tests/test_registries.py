"""The registries and the shape of the code, in one module (issue 49).

The shape of the code (issue 15): stages, checks, persona sources and reward models are
registries that every consumer reads, so a change is a module (and a line) rather than a hunt.

The change scenarios run on a copy of the tree: each adds what it adds, in the files named, and
one real build (simulator, Prefect, Parquet) plus `prb eval` and `prb audit` on it show every
registration picked up everywhere it should be.

One `Registry[T]` (issue 40): lazy references, a type check on load, clashes refused, a
failing plugin isolated to one warning line (issue 38), and a stage list checked against what
each stage reads and writes.

Plugins (issue 27): another package adds a reward model, a probe, a check, a persona source
or a rejected strategy through entry points (`prb.<kind>`), with no prb file changed. The test
builds a tiny plugin package, installs it (pip, not editable) into a folder of its own that only
the commands run here see, and finds its reward model in `prb eval --help` and in a run, and its
probe in `prb audit`.
"""

from __future__ import annotations

import ast
import csv
import json
import logging
import re
import shutil
import sqlite3
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import conftest
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import REPO, build, checkout_copy, prefect_env, write_config
from public_releases import controlled

from pipeline.registry import Registry, RegistryError

# === the shape of the code and the change scenarios =====================================


PIPELINE = REPO / "pipeline"


# --- the import graph ---------------------------------------------------------------------------


def _modules() -> dict[str, Path]:
    out = {}
    for p in PIPELINE.rglob("*.py"):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]):
    """(imported pipeline module, imported names) of one module, function-level imports and
    TYPE_CHECKING blocks included: a type-only import is still a dependency a reader follows."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            targets = [(a.name, []) for a in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative import
                parts = name.split(".")
                keep = len(parts) - node.level + (path.name == "__init__.py")
                base = ".".join(parts[:keep] + ([base] if base else []))
            targets = [
                (f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, [a.name])
                for a in node.names
            ]
        for target, names in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                yield target, names


def test_no_import_cycles_and_no_private_names_across_modules():
    modules = _modules()
    graph = {m: set() for m in modules}
    private = []
    for m, path in modules.items():
        for target, names in _imports(m, path, modules):
            graph[m].add(target)
            private += [(m, target, n) for n in names if n.startswith("_")]
    assert not private, private

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = sorted(m for m in modules if m in reach(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_no_stage_imports_another_stage_and_no_list_of_them_elsewhere():
    modules = _modules()
    stage_modules = {m for m in modules if m.startswith("pipeline.stages.")} - {
        "pipeline.stages.base"
    }
    for m in stage_modules:
        imported = {t for t, _ in _imports(m, modules[m], modules)}
        assert not imported & (stage_modules - {m}), m
    # `git grep`: the stage names in one tuple and the checks' in none, outside the registries
    names = ["personas", "questions", "rubrics", "pairs", "filters", "annotation", "release"]
    for path in PIPELINE.rglob("*.py"):
        text = path.read_text()
        if path.relative_to(PIPELINE).as_posix() == "stages/__init__.py":
            continue
        for a, b, c in zip(names, names[1:], names[2:], strict=False):
            assert f'"{a}", "{b}", "{c}"' not in text, f"{path} lists stages"
        assert '"quality", "adherence"' not in text and "quality.CHECK," not in text, path


def test_every_derived_view_agrees_with_the_registries():
    from pipeline.checks import CHECKS, FilterConfig, setting_names
    from pipeline.release.schema import FEATURES
    from pipeline.stages import STAGES, build_tasks, call_order, prompt_samples

    settings = [n for c in CHECKS for n in c.settings.model_fields]
    assert sorted(setting_names()) == sorted(settings)
    assert list(FilterConfig.model_fields) == [*setting_names(), "evaluate_all", "mode", "judges"]
    assert list(FEATURES["pair_checks"]) == [k for c in CHECKS for k in c.features]
    assert set(build_tasks()) == {t for s in STAGES for t in s.tasks}
    assert {t for c in CHECKS for t in c.tasks} <= set(build_tasks())
    assert set(prompt_samples()) == set(build_tasks())  # preflight renders every build prompt
    names = [n for c in CHECKS for n in c.call_names]
    assert names == call_order()[-len(names) :]
    assert [c.cost for c in sorted(CHECKS, key=lambda c: c.cost)][0] == 0


# --- twelve change scenarios, on a copy of the tree -----------------------------------------------

STAGE_MODULE = '''"""Added by a test: passes on every task with a question, in a funnel row."""

from pipeline.records import Task
from pipeline.stages.base import RunContext, Stage, StageReport
from pipeline.store import Records


async def run(ctx: RunContext, tasks: Records) -> StageReport:
    STAGE.file(ctx.run_dir).write_all(t for t in tasks if t.question.strip())
    records = Records(STAGE.file(ctx.run_dir), STAGE.output_id)
    return StageReport(records, len(records))


STAGE = Stage(name="question_gate", reads=(Task,), input_id=lambda t: t.task_id, output=Task,
              output_id=lambda t: t.task_id, run=run, funnel="questions_gated",
              about="tasks whose question is not empty")
'''
STRATEGY_MODULE = '''"""Added by a test: from the same content plan, the rejected prompt told to
write for no one in particular, in this module's own words (no table entry)."""

from pipeline.calls import LLMError
from pipeline.strategies.base import StrategySpec


async def write(w, rec, name):
    try:
        first = await w.planned(rec)
        said = {"strategy": name, "strategy_instruction": "Write for no one in particular."}
        rejected = await w.ask("rejected", w.tokens, **first.common, **said)
    except LLMError as e:
        return w.failed(rec, e)
    return w.made(rec, name, first, rejected)


STRATEGY = StrategySpec("generic_answer", "the answer for no one in particular", write)
'''
READING_STAGE_MODULE = '''"""Added by a test: a rubric goes on only if its user is in the personas
stage's file, read through the declared `Persona` read, never by the file's name."""

from pipeline.records import Persona, RubricRecord
from pipeline.stages.base import RunContext, Stage, StageReport
from pipeline.store import Records


async def run(ctx: RunContext, rubrics: Records) -> StageReport:
    known = {p.persona_id for p in ctx.read(Persona)}
    STAGE.file(ctx.run_dir).write_all(r for r in rubrics if r.task.persona.persona_id in known)
    records = Records(STAGE.file(ctx.run_dir), STAGE.output_id)
    return StageReport(records, len(records))


STAGE = Stage(name="known_users", reads=(RubricRecord, Persona),
              input_id=lambda r: r.task.task_id, output=RubricRecord,
              output_id=lambda r: r.task.task_id, run=run, funnel="rubrics_of_known_users",
              about="rubrics whose user is in the personas file")
'''
MODEL_STAGE_MODULE = '''"""Added by a test: a model screens each pair's chosen answer, with a
schema of its own, and the pairs it finds off the question go no further."""

from pydantic import Field

from pipeline.llm.prompts import load_prompt
from pipeline.calls import LLMError
from pipeline.records import Dropped, Pair, Record
from pipeline.stages.base import RunContext, Stage, model_stage_done, process_stage
from pipeline.store import Records


class Screen(Record):  # the model's answer: this stage's own schema
    on_question: bool
    note: str = ""


async def run(ctx: RunContext, pairs: Records):
    prompt = load_prompt("screen_answer")

    async def screen(pair: Pair) -> Pair | Dropped:
        try:
            result = await ctx.llm.call(prompt, stage=STAGE.name, model=ctx.cfg.model.judge,
                                        variables={"question": pair.task.question,
                                                   "answer": pair.chosen})
        except LLMError as e:
            return Dropped(stage=STAGE.name, id=pair.pair_id, reason=f"screen_{e.kind}",
                           detail=e.detail)
        if not result.value.on_question:
            return Dropped(stage=STAGE.name, id=pair.pair_id, reason="screen_off_question",
                           detail=result.value.note)
        return pair

    await process_stage(STAGE, pairs, ctx.run_dir, screen)
    return model_stage_done(STAGE, ctx, pairs)


STAGE = Stage(name="answer_screen", reads=(Pair,), input_id=lambda p: p.pair_id, output=Pair,
              output_id=lambda p: p.pair_id, run=run, role="judge", tasks=("screen_answer",),
              samples={"screen_answer": {"question": "Q?", "answer": "A."}},
              funnel="pairs_screened", about="pairs whose chosen answer a model finds on the "
              "question")
'''
SCREEN_PROMPT = {
    "task": "screen_answer",
    "version": 1,
    "description": "Added by a test: is the answer about the question?",
    "output": "pipeline.stages.answer_screen:Screen",
    "params": {"temperature": 0.0, "max_tokens": 100},
    "system": "Say whether the answer addresses the question. Answer with JSON matching "
    "{{ output_schema }}",
    "user": "<question>{{ question }}</question>\n<answer>{{ answer }}</answer>",
}
CHECK_MODULE = '''"""Added by a test: which answer a judge finds politer, in both orders."""

from typing import Annotated, Literal

from pipeline.checks.base import Ask, Check, Figure, Released, Report, shown
from pipeline.records import Record


class Politer(Record):  # the judge's answer: this check's own schema
    politer: Literal["A", "B", "tie"]
    why: str = ""


class Settings(Record):
    drop_politeness_gap: bool = False


class Result(Record):
    ab: Annotated[str, Released("politeness_ab")]
    ba: Annotated[str, Released("politeness_ba")]


def ask(order):
    return Ask(f"politeness_{order}", "judge_politeness",
               lambda pair, _: {"question": pair.task.question, **shown(pair, order)})


def measure(pair, done, _):
    if {"politeness_ab", "politeness_ba"} <= set(done):
        ab, ba = done["politeness_ab"].value, done["politeness_ba"].value
        return Result(ab=ab.politer, ba=ba.politer)
    return None


CHECK = Check(
    name="politeness", order=70, settings=Settings, result=Result,
    asks=(ask("ab"), ask("ba")),
    samples={"judge_politeness": {"question": "Q?", "answer_a": "A.", "answer_b": "B."}},
    measure=measure,
    decide=lambda r, s: ["politeness_gap"] if s.drop_politeness_gap and r.ab != r.ba else [],
    report=Report(
        about="politeness verdicts in both orders",
        docs={"drop_politeness_gap": "drop pairs whose answers differ in politeness:"},
        figures=(Figure("politeness", "politeness verdicts differ by order",
                        lambda v: float(v["politeness_ab"] != v["politeness_ba"])),),
    ),
)
'''
CHECK_PROMPT = {
    "task": "judge_politeness",
    "version": 1,
    "description": "Added by a test: which answer is politer.",
    "output": "pipeline.checks.politeness:Politer",
    "params": {"temperature": 0.0, "max_tokens": 100},
    "system": "Pick the politer answer, or tie. Answer with JSON matching {{ output_schema }}",
    "user": "<question>{{ question }}</question>\n<answer_a>{{ answer_a }}</answer_a>\n"
    "<answer_b>{{ answer_b }}</answer_b>",
}
BACKEND_MODULE = '''"""Added by a test: an OpenAI-compatible provider that wants its key in an
`api-key` header (as Azure does) and tags what it answered."""

import openai

from pipeline.llm.backends.openai import OpenAIBackend


class KeyHeaderBackend(OpenAIBackend):
    name = "keyheader"
    batch = False

    def __init__(self, cfg, concurrency):
        super().__init__(cfg, concurrency)
        self.client = openai.AsyncOpenAI(base_url=cfg.base_url, api_key="unused", max_retries=0,
                                         timeout=cfg.timeout_s, default_headers={
                                             "api-key": cfg.api_key.get_secret_value()})

    async def send(self, req):
        reply = await super().send(req)
        reply.tokens = {**reply.tokens, "via": "keyheader"}
        return reply
'''
FREE_CHECK_MODULE = '''"""Added by a test: exclamation marks in each answer, model-free."""

from typing import Annotated

from pydantic import Field

from pipeline.checks.base import Check, Figure, Released, Report
from pipeline.records import Record


class Settings(Record):
    max_exclamations: int = Field(1000, ge=0)


class Result(Record):
    chosen: Annotated[int, Released("chosen_exclamations")]
    rejected: Annotated[int, Released("rejected_exclamations")]


CHECK = Check(
    name="exclamations", order=80, settings=Settings, result=Result,
    measure=lambda p, _, __: Result(chosen=p.chosen.count("!"), rejected=p.rejected.count("!")),
    decide=lambda r, s: ["exclaiming"] if max(r.chosen, r.rejected) > s.max_exclamations else [],
    report=Report(
        about="exclamation marks in each answer",
        docs={"max_exclamations": "exclamation marks in an answer ≤"},
        figures=(Figure("exclamations", "exclamation marks per answer",
                        lambda v: (v["chosen_exclamations"], v["rejected_exclamations"]),
                        "sides"),),
    ),
)
'''
PROBE_MODULE = '''"""Added by a test: the answer asking more questions wins."""

from pipeline.probes.base import ProbeSpec, more_wins, rule


def questions(rows, seed=0):
    scores = [more_wins(r["chosen"].count("?"), r["rejected"].count("?")) for r in rows]
    return [rule("cue: question marks", "the answer asking more questions wins", scores, seed)]


PROBE = ProbeSpec("questions", "leakage", 25, questions, "more question marks win")
'''
JUDGE_PROBE_MODULE = '''"""Added by a test: with the user's profile, chosen wins in both orders."""

from pipeline.probes.base import ProbeSpec, rule


async def asks(rows, judge, seed=0):
    verdicts = await judge.pairwise(("true",))
    both = [float(v["true_ab"] == "A" and v["true_ba"] == "B") for v in verdicts if v]
    return [rule("judge, chosen in both orders", "chosen wins A and B", both, seed)]


PROBE = ProbeSpec("judge_both", "judge", 60, None, "chosen wins in both orders", asks=asks)
'''
SOURCE_CLASS = '''

class CsvSource(FileSource):
    """Added by a test: users from `csv:PATH` (user_id, category, question, posts split by ||)."""

    name = "csv"

    def matches(self, spec: str) -> bool:
        return spec.startswith("csv:")

    def _load(self, cfg):
        import csv

        from pipeline.paths import resolve_path
        from pipeline.records import ProfileItem

        personas, questions = [], []
        with open(resolve_path(cfg.source[4:]), newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                uid, cat = row["user_id"], row["category"]
                posts = [p.strip() for p in row["posts"].split("||")]
                profile = [ProfileItem(id=f"{uid}-p{i}", category=cat, text=t)
                           for i, t in enumerate(posts, 1)]
                personas.append(Persona(persona_id=uid, category=cat, profile=profile,
                                        source="csv"))
                questions.append(Question(question_id=f"q-{uid}", category=cat,
                                          question=row["question"], asked_by=[uid]))
        return personas, questions

    def digests(self, cfg):
        from pipeline.paths import resolve_path

        path = resolve_path(cfg.source[4:])
        return {str(path): file_digest(path)}
'''
REWARD_MODULE = '''"""Added by a test: the shorter answer wins."""

from dataclasses import dataclass

from pipeline.eval.rewards import RewardModel


@dataclass
class ShortestRM(RewardModel):
    batched = True

    async def score_many(self, queries):
        return [-float(len(q.response.split())) for q in queries]
'''


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r}"
    path.write_text(text.replace(old, new))


def test_twelve_change_scenarios_each_touch_at_most_three_files(tmp_path, sim_url):
    tree = checkout_copy(tmp_path / "prb")
    touched: dict[str, set[str]] = {}

    def write(scenario: str, rel: str, text: str | None = None, edit: tuple | None = None):
        touched.setdefault(scenario, set()).add(rel)
        if edit:
            _edit(tree / rel, *edit)
        else:
            (tree / rel).write_text(text)

    # a stage: its module and its name in the stages' registry
    write("stage", "pipeline/stages/question_gate.py", STAGE_MODULE)
    write(
        "stage",
        "pipeline/stages/__init__.py",
        edit=(
            '            "questions",\n',
            '            "questions",\n            "question_gate",\n',
        ),
    )
    # a stage that reads another stage's file (besides its first read): module + its name
    write("reading stage", "pipeline/stages/known_users.py", READING_STAGE_MODULE)
    write(
        "reading stage",
        "pipeline/stages/__init__.py",
        edit=('            "rubrics",\n', '            "rubrics",\n            "known_users",\n'),
    )
    # a model-calling stage with its own output schema: its module, its prompt, its name
    write("model stage", "pipeline/stages/answer_screen.py", MODEL_STAGE_MODULE)
    write(
        "model stage", "prompts/screen_answer.yaml", yaml.safe_dump(SCREEN_PROMPT, sort_keys=False)
    )
    write(
        "model stage",
        "pipeline/stages/__init__.py",
        edit=('            "pairs",\n', '            "pairs",\n            "answer_screen",\n'),
    )
    # a judge check with its own output schema: its module (found by itself) and its prompt
    write("check", "pipeline/checks/politeness.py", CHECK_MODULE)
    write("check", "prompts/judge_politeness.yaml", yaml.safe_dump(CHECK_PROMPT, sort_keys=False))
    # a rejected strategy: its entry in the rejected prompt's table
    write(
        "strategy",
        "prompts/rejected.yaml",
        edit=(
            "  wrong_tone: >\n",
            "  wrong_depth: >\n    Answer at the opposite depth from the one the aspects ask for.\n"
            "  wrong_tone: >\n",
        ),
    )
    # a persona source: a class and its place in the sources' registry, in one module
    write(
        "source",
        "pipeline/personas/sources.py",
        edit=(
            "\n\nSOURCES: Registry[PersonaSource] = Registry(",
            SOURCE_CLASS + "\n\nSOURCES: Registry[PersonaSource] = Registry(",
        ),
    )
    write(
        "source",
        "pipeline/personas/sources.py",
        edit=(
            '{"library": LibrarySource(), "hub": HubSource()},',
            '{"library": LibrarySource(), "hub": HubSource(), "csv": CsvSource()},',
        ),
    )
    # a reward model: its adapter and its line in the kinds table
    write("reward model", "pipeline/eval/shortest.py", REWARD_MODULE)
    write(
        "reward model",
        "pipeline/eval/models.py",
        edit=(
            "                options=HF_OPTIONS,\n            ),\n        )\n",
            "                options=HF_OPTIONS,\n            ),\n"
            '            Kind("shortest", "shorter answer wins", '
            '"pipeline.eval.shortest:ShortestRM"),\n        )\n',
        ),
    )
    # a backend: its module and its line in the backends' registry
    write("backend", "pipeline/llm/backends/keyheader.py", BACKEND_MODULE)
    write(
        "backend",
        "pipeline/llm/backends/__init__.py",
        edit=(
            '        "anthropic": "pipeline.llm.backends.anthropic:AnthropicBackend",\n',
            '        "anthropic": "pipeline.llm.backends.anthropic:AnthropicBackend",\n'
            '        "keyheader": "pipeline.llm.backends.keyheader:KeyHeaderBackend",\n',
        ),
    )
    # a model-free check: its module alone
    write("model-free check", "pipeline/checks/exclamations.py", FREE_CHECK_MODULE)
    # a strategy that writes its answers its own way: one module, found by the package
    write("strategy module", "pipeline/strategies/generic_answer.py", STRATEGY_MODULE)
    # a probe: one module, found by the probes' package
    write("probe", "pipeline/probes/questions.py", PROBE_MODULE)
    # a judge probe: one module too, handed the audit's judge
    write("judge probe", "pipeline/probes/judge_both.py", JUDGE_PROBE_MODULE)
    # the files each change touches (its test aside)
    limits = {
        "stage": 2,  # module + its name in the registry
        "model stage": 3,  # module (with its output model) + prompt + its name
        "check": 2,  # module (with its output model) + prompt
        "model-free check": 1,
        "strategy": 1,
        "strategy module": 1,
        "source": 1,
        "reward model": 2,
        "backend": 2,
        "probe": 1,
        "judge probe": 1,
        "reading stage": 2,  # module + its name in the registry
    }
    assert set(touched) == set(limits)
    for scenario, files in touched.items():
        assert len(files) <= limits[scenario], (scenario, files)

    users = tmp_path / "users.csv"
    with users.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "category", "question", "posts"])
        hobbies = ["pottery", "fencing", "baking", "rowing", "chess", "birding"]
        for i, cat in enumerate(["Arts", "Home", "Civic"] * 2):
            w.writerow(  # each user's own hobby: an aspect that names nothing of them is refused
                [
                    f"u{i}",
                    cat,
                    f"How do I get better at thing number {i}?",
                    f"I am new to {hobbies[i]} and on a tight budget. || I only have ten "
                    "minutes a day. || Please keep it short, no fluff.",
                ]
            )
    config = write_config(
        tmp_path,
        sim_url,
        run_id="changed",
        personas={"source": f"csv:{users}", "per_category": 2},
        generation={"word_budget": 100, "strategies": ["wrong_depth", "generic_answer"]},
        filters={"drop_politeness_gap": False},
        model={"provider": "keyheader"},
    )
    data = yaml.safe_load(config.read_text())
    data["personas"].pop("categories", None)  # from the data: Arts, Civic, Home
    config.write_text(yaml.safe_dump(data))
    env = prefect_env(PYTHONPATH=str(tree))

    def prb(*args: str) -> subprocess.CompletedProcess:
        return conftest.prb(*args, env=env, cwd=tree)

    built = prb("build", "--config", str(config))
    assert built.returncode == 0, built.stderr[-3000:]
    run_dir, release = tmp_path / "outputs" / "changed", tmp_path / "outputs/changed/release"
    manifest = json.loads((release / "manifest.json").read_text())
    card = (release / "README.md").read_text()
    rows = [r for p in sorted(release.glob("*/*.parquet")) for r in pq.read_table(p).to_pylist()]
    fingerprint = json.loads((run_dir / "fingerprint.json").read_text())["inputs"]
    audited = prb("audit", str(run_dir), "--judge", "--config", str(config))
    assert audited.returncode == 0, audited.stderr[-2000:]

    # the reading stage: in its place, every rubric's user found through its declared read
    known = (run_dir / "known_users.jsonl").read_text().splitlines()
    assert len(known) == len((run_dir / "rubrics.jsonl").read_text().splitlines()) > 0
    stages = [f["stage"] for f in manifest["funnel"]]
    assert stages[stages.index("rubrics") + 1] == "rubrics_of_known_users", stages
    # the stage: run in its place, in the funnel, the card and the audit
    assert len((run_dir / "question_gate.jsonl").read_text().splitlines()) == 6
    assert [f["stage"] for f in manifest["funnel"]][:3] == [
        "personas",
        "questions",
        "questions_gated",
    ]
    assert "`questions_gated`" in card and "tasks whose question is not empty" in card
    assert "questions_gated" in audited.stdout
    # the model stage: run after the pairs, its calls made through its own schema, its prompt
    # in the manifest and the fingerprint, and the filters read its pairs
    screened = (run_dir / "answer_screen.jsonl").read_text().splitlines()
    assert screened and "pairs_screened" in [f["stage"] for f in manifest["funnel"]]
    stages_run = [f["stage"] for f in manifest["funnel"]]
    assert stages_run.index("pairs") < stages_run.index("pairs_screened")
    assert stages_run.index("pairs_screened") < stages_run.index("filters_kept")
    assert "screen_answer" in manifest["prompts"] and "prompts.screen_answer" in fingerprint
    assert "`pairs_screened`" in card
    # the check: its calls made, recorded, released, documented, fingerprinted
    records = [json.loads(x) for x in (run_dir / "filters.jsonl").read_text().splitlines()]
    assert any("politeness" in r["checks"] for r in records)
    assert {"politeness_ab", "politeness_ba"} <= set(rows[0]["pair_checks"])
    assert "`drop_politeness_gap`" in card and "politeness verdicts in both orders" in card
    assert "judge_politeness" in manifest["prompts"] and "prompts.judge_politeness" in fingerprint
    assert manifest["config"]["filters"]["drop_politeness_gap"] is False
    audit = json.loads((run_dir / "audit" / "audit.json").read_text())  # and in the audit
    assert "politeness" in {f["key"] for f in audit["figures"]["all judged"]}
    assert "politeness verdicts differ by order" in (run_dir / "audit" / "summary.md").read_text()
    # the strategies: used, released, counted on the card
    pairs = [json.loads(x) for x in (run_dir / "pairs.jsonl").read_text().splitlines()]
    made = {p["rejected_strategy"] for p in pairs}
    assert made == {"wrong_depth", "generic_answer"}, made
    assert {r["rejected_strategy"] for r in rows} <= made and "`wrong_depth`" in card
    if "generic_answer" in {r["rejected_strategy"] for r in rows}:  # the module's own words
        assert "(the answer for no one in particular)" in card
    generic = [p for p in pairs if p["rejected_strategy"] == "generic_answer"]
    assert all(p["rejected_for"] is None and p["rejected"] != p["chosen"] for p in generic)
    # the source: its users, its categories (from the data) and its file in the fingerprint
    assert sorted(manifest["per_category"]) == ["Arts", "Civic", "Home"]
    assert {r["persona_id"] for r in rows} <= {f"u{i}" for i in range(6)}
    assert any(k.endswith("users.csv") for k in fingerprint)
    # the reward model: on the leaderboard beside the baselines
    evaluated = prb(
        "eval", str(release), "--config", str(config), "--rm", "shortest", "--rm", "length"
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    board = (release.parent / "eval" / "leaderboard.csv").read_text()
    assert "shortest/profile" in board and "length/profile" in board
    helped = prb("eval", "score", "--help").stdout
    shown = " ".join(helped.replace("│", " ").split())  # unwrap rich's box
    assert "shortest: shorter answer wins" in shown
    # the backend: every call of the build went through it
    assert manifest["config"]["model"]["provider"] == "keyheader"
    cache = sqlite3.connect(tmp_path / "outputs" / "cache.sqlite")
    vias = {json.loads(u).get("via") for (u,) in cache.execute("SELECT usage FROM responses")}
    assert vias == {"keyheader"}
    # the model-free check: measured on every pair before any judge, released, documented
    assert all(r["checks"]["exclamations"]["chosen"] >= 0 for r in records)
    assert all(not any(k.startswith("excl") for k in r["calls"]) for r in records)
    assert all(isinstance(r["pair_checks"]["chosen_exclamations"], int) for r in rows)
    assert "`max_exclamations`" in card and "exclamation marks in each answer" in card
    assert manifest["config"]["filters"]["max_exclamations"] == 1000
    assert "exclamations" in {f["key"] for f in audit["figures"]["all judged"]}
    # the probe: in the audit of the release, with its interval
    probes = json.loads((run_dir / "audit" / "audit.json").read_text())["probes"]["probes"]
    assert "cue: question marks" in {p["name"] for p in probes}
    # the judge probe: asked with the others of its family, by the audit's judge
    judged = {p["name"]: p for p in probes if p["family"] == "judge"}
    assert judged["judge, chosen in both orders"]["n"] > 0
    assert (
        "judge, persona-aware" in judged
        and "judge, swap 2x2: each answer preferred by its own user" in judged
    )


# --- categories come from the data ------------------------------------------------------------


def test_a_fourth_category_builds_releases_and_shows_everywhere(tmp_path, sim_url):
    lib, qs = tmp_path / "library", tmp_path / "questions"
    shutil.copytree(REPO / "personas" / "library", lib)
    shutil.copytree(REPO / "personas" / "questions", qs)
    base = [json.loads(x) for x in (lib / "art_and_entertainment.jsonl").read_text().splitlines()]
    new = []
    for i, p in enumerate(base[:3], 1):
        pid = f"st-{i:03d}"
        profile = [
            {
                **item,
                "id": item["id"].replace(p["persona_id"], pid),
                "category": "Science_and_Technology",
            }
            for item in p["profile"]
        ]
        new.append(
            {**p, "persona_id": pid, "category": "Science_and_Technology", "profile": profile}
        )
    (lib / "science_and_technology.jsonl").write_text("".join(json.dumps(p) + "\n" for p in new))
    questions = [
        {
            "question_id": f"st-q{i}",
            "category": "Science_and_Technology",
            "question": f"How should I start learning electronics project {i}?",
        }
        for i in range(4)
    ]
    (qs / "science_and_technology.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions)
    )
    config = write_config(
        tmp_path,
        sim_url,
        personas={"library": [str(lib)], "questions": [str(qs)], "per_category": 2},
    )
    data = yaml.safe_load(config.read_text())
    data["personas"].pop("categories")  # every category of the source
    config.write_text(yaml.safe_dump(data))
    result = build(config)
    release = Path(result["release_dir"])
    manifest = json.loads((release / "manifest.json").read_text())
    assert "Science_and_Technology" in manifest["per_category"]
    assert (release / "Science_and_Technology" / "test-00000-of-00001.parquet").exists()
    card = (release / "README.md").read_text()
    assert "config_name: Science_and_Technology" in card and "`Science_and_Technology`" in card
    from pipeline.audit.report import write_report
    from pipeline.release.publish import verify

    assert verify(release) == []
    report = json.loads((write_report(Path(result["run_dir"])) / "audit.json").read_text())
    assert "Science_and_Technology" in {row["category"] for row in report["by_category"]}
    evaluated = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "eval", str(release), "--rm", "length"],
        capture_output=True,
        text=True,
        timeout=120,
        env=prefect_env(),
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert "acc_Science_and_Technology" in (release.parent / "eval" / "leaderboard.csv").read_text()


# --- cheap checks first ------------------------------------------------------------------------


def test_cheap_checks_first_release_the_same_pairs_for_fewer_judge_calls(tmp_path, sim_factory):
    """On a degraded simulator many rejected answers are short and unhelpful: the length check
    drops them before any judge is asked. The released rows are those of the auditing mode."""
    from pipeline.sim.responder import DEGRADED

    url = sim_factory(degrade_rate=0.5)
    results = {}
    for mode, evaluate_all in (("audit", True), ("cheap", False)):
        config = write_config(
            tmp_path / mode,
            url,
            personas={"per_category": 3},
            filters={"evaluate_all": evaluate_all},
        )
        results[mode] = build(config)
    audit, cheap = results["audit"], results["cheap"]

    def data(result: dict) -> dict[str, bytes]:
        release = Path(result["release_dir"])
        files = [p for p in sorted(release.glob("*/*")) if p.suffix in (".parquet", ".jsonl")]
        return {p.relative_to(release).as_posix(): p.read_bytes() for p in files}

    assert data(cheap) == data(audit) and cheap["funnel"] == audit["funnel"]
    calls = {m: r["usage"]["filters"]["calls"] for m, r in results.items()}
    assert calls["cheap"] < calls["audit"], calls
    records = [
        json.loads(x) for x in (Path(cheap["run_dir"]) / "filters.jsonl").read_text().splitlines()
    ]
    short = [r for r in records if r["pair"]["rejected"] == DEGRADED]
    assert short, "the degraded run must have short rejected answers"
    for r in short:  # dropped by the length check: no judge was asked
        assert "length_ratio" in r["reasons"] and not r["calls"]
        assert r["skipped"] == ["quality", "adherence", "blind"]  # counterfactual: off
    kept = [r for r in records if r["kept"]]
    assert kept and all(not r["skipped"] and len(r["calls"]) == 6 for r in kept)


def test_the_architecture_map_names_every_module_in_its_folders_row():
    rows = [r for r in (REPO / "ARCHITECTURE.md").read_text().splitlines() if r.startswith("| ")]
    missing = []
    for path in sorted(PIPELINE.rglob("*.py")):
        rel = path.relative_to(PIPELINE)
        if path.name == "__init__.py":
            continue  # a package: its row (or its parent's) describes it
        head = f"| `pipeline/{rel.parts[0]}/`" if len(rel.parts) > 1 else "| top level"
        if path.name not in next((r for r in rows if r.startswith(head)), ""):
            missing.append(str(rel))
    assert not missing, f"ARCHITECTURE.md's map misses {missing}"


def test_the_architecture_diagram_names_every_folder_and_every_check():
    """Issue 49: the diagram omitted `rl/` and the artifact gate."""
    diagram = (REPO / "ARCHITECTURE.md").read_text().split("```mermaid")[1].split("```")[0]
    folders = [p.name for p in PIPELINE.iterdir() if (p / "__init__.py").exists()]
    folders += ["templates"]  # package data, no __init__
    missing = [f"{f}/" for f in folders if f"{f}/" not in diagram]
    checks = [
        p.stem for p in (PIPELINE / "checks").glob("*.py") if p.stem not in ("__init__", "base")
    ]
    missing += [c for c in checks if c not in diagram]
    assert not missing, f"ARCHITECTURE.md's diagram misses {missing}"


def test_the_eval_subcommands_share_one_declaration_of_their_options():
    """Issue 49: score, bon and rl repeated the same options; `eval_options.shared` declares
    them once, first and alike in each, and every CLI module stays wiring (under 200 lines)."""
    from typer.main import get_command

    from pipeline.cli import app
    from pipeline.cli.eval_options import SHARED

    names = [p.name for p in SHARED]
    group = get_command(app).commands["eval"]
    helps = []
    for name in ("score", "bon", "rl"):
        params = group.commands[name].params
        assert [p.name for p in params[: len(names)]] == names, name
        helps.append([getattr(p, "help", None) for p in params[: len(names)]])
    assert helps[0] == helps[1] == helps[2]
    long = {
        p.name: n
        for p in (PIPELINE / "cli").glob("*.py")
        if (n := len(p.read_text().splitlines())) >= 200
    }
    assert not long, f"CLI modules of 200 lines or more: {long}"


def test_the_folders_form_layers_no_import_goes_up():
    """Issue 40: each folder (and top-level module) is a node; an import from one to another is
    an edge, function-level and type-only imports included. No cycle: a folder that needs
    another's code imports it, and what two need of each other lives in a layer below both."""
    modules = _modules()

    def node(m: str) -> str:
        return ".".join(m.split(".")[:2])  # pipeline.checks.artifact -> pipeline.checks

    edges: dict[str, dict[str, list[str]]] = {}
    for m, path in modules.items():
        for target, _ in _imports(m, path, modules):
            if node(m) != node(target):
                edges.setdefault(node(m), {}).setdefault(node(target), []).append(
                    f"{m} -> {target}"
                )

    def path_back(start: str) -> list[str] | None:
        """The imports of a cycle through `start`, if there is one."""
        todo, came = [start], {start: None}
        while todo:
            here = todo.pop()
            for nxt in edges.get(here, {}):
                if nxt == start:
                    hops = [edges[here][start][0]]
                    while came[here] is not None:
                        hops.append(edges[came[here]][here][0])
                        here = came[here]
                    return hops[::-1]
                if nxt not in came:
                    came[nxt] = here
                    todo.append(nxt)
        return None

    cycles = {n: hops for n in sorted(edges) if (hops := path_back(n))}
    assert not cycles, "\n".join(f"{n}: {' ; '.join(h)}" for n, h in cycles.items())


# === one Registry[T]: lazy references, clashes, failing plugins =========================


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
        return conftest.prb(*args, env=env, cwd=tmp_path)

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
        n: f"test_registries:{v}"
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


# === plugins installed as another package ===============================================


PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "prb-plugin-demo"
version = "0.1.0"

[tool.setuptools]
py-modules = ["prb_plugin_demo"]

[project.entry-points."prb.reward_models"]
shortest = "prb_plugin_demo:KIND"

[project.entry-points."prb.probes"]
questions = "prb_plugin_demo:PROBE"
"""
MODULE = '''"""A reward model and a probe from outside prb."""

from pipeline.probes.base import ProbeSpec, more_wins, rule
from pipeline.eval.models import Kind
from pipeline.eval.rewards import RewardModel


class ShortestRM(RewardModel):
    batched = True

    async def score_many(self, queries):
        return [-float(len(q.response.split())) for q in queries]


KIND = Kind("shortest", "plugin: the shorter answer wins", "prb_plugin_demo:ShortestRM")


def questions(rows, seed=0):
    scores = [more_wins(r["chosen"].count("?"), r["rejected"].count("?")) for r in rows]
    return [rule("cue: question marks", "the answer asking more questions wins", scores, seed)]


PROBE = ProbeSpec("questions", "leakage", 25, questions, "more question marks win")
'''


def flat(help_text: str) -> str:
    """Help text as one line: rich wraps it inside a box."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", help_text).split())


def test_a_plugin_package_adds_a_reward_model_and_a_probe(tmp_path):
    pkg = tmp_path / "plugin"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "prb_plugin_demo.py").write_text(MODULE)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(pkg),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = prefect_env(PYTHONPATH=str(target))

    def prb(*args: str) -> subprocess.CompletedProcess:
        return conftest.prb(*args, env=env, cwd=tmp_path)

    helped = prb("eval", "score", "--help")
    assert helped.returncode == 0 and "plugin: the shorter answer wins" in flat(helped.stdout)
    release = tmp_path / "r.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in controlled()))
    done = prb(
        "eval",
        str(release),
        "--rm",
        "shortest",
        "--rm",
        "length",
        "--bootstrap",
        "20",
        "--out",
        str(tmp_path / "eval"),
    )
    assert done.returncode == 0, done.stderr
    board = (tmp_path / "eval" / "leaderboard.csv").read_text()
    assert "shortest/profile" in board and "length/profile" in board
    done = prb("audit", str(release), "--out", str(tmp_path / "audit"))
    assert done.returncode == 0, done.stderr
    names = [
        p["name"]
        for p in json.loads((tmp_path / "audit" / "audit.json").read_text())["probes"]["probes"]
    ]
    assert "cue: question marks" in names
    without = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "eval", "score", "--help"],
        env=prefect_env(),
        capture_output=True,
        text=True,
    )
    assert "shorter answer wins" not in flat(without.stdout)  # nothing of it outside that folder
    assert not list(Path(sys.prefix).glob("lib/*/site-packages/prb_plugin_demo*"))


def test_a_stage_opens_only_the_stage_files_it_declares(tmp_path, sim_url, monkeypatch):
    """Issue 49: the pairs stage opened the questions stage's file by its name. Every stage
    file a stage opens while it runs is its own, the drops, or the file of a record type it
    declares in `reads` (the latest earlier stage writing it): a side door fails here."""
    import dataclasses
    import sys as _sys

    import pipeline.run.flow as flow

    running: list[str | None] = [None]
    opened: dict[str, set[str]] = {}

    def hook(event, args):
        if event == "open" and running[0] and isinstance(args[0], str | Path):
            path = Path(args[0])
            if path.suffix == ".jsonl" and path.parent.name == "demo":
                opened.setdefault(running[0], set()).add(path.name)

    def watched(stage):
        async def run(ctx, inputs):
            running[0] = stage.name
            try:
                return await stage.run(ctx, inputs)
            finally:
                running[0] = None

        return dataclasses.replace(stage, run=run)

    monkeypatch.setattr(flow, "STAGES", tuple(watched(s) for s in flow.STAGES))
    monkeypatch.setattr(flow, "_TASKS", {})  # the tasks an earlier build made hold the stages
    _sys.addaudithook(hook)  # cannot be removed: it records only while `running` names a stage
    build(write_config(tmp_path, sim_url, personas={"per_category": 2}))
    assert {"pairs", "filters"} <= set(opened), opened
    order = list(flow.STAGES)
    for i, stage in enumerate(order):
        writers = {
            t: next(s for s in reversed(order[:i]) if s.output is t).name for t in stage.reads
        }
        allowed = {f"{stage.name}.jsonl", "dropped.jsonl"} | {
            f"{w}.jsonl" for w in writers.values()
        }
        assert opened.get(stage.name, set()) <= allowed, (stage.name, opened[stage.name])


def test_no_module_outside_the_stages_opens_a_stage_file_by_its_name():
    """Issue 49: the annotation export opened `StageFile(run_dir, "filters", ...)`. A tool that
    reads a finished run asks `stages.written(RecordType, run_dir)` for the file."""
    import ast

    import pipeline.stages as registry

    names = {s.name for s in registry.stages() if s.output is not None}
    found = []
    for path in (REPO / "pipeline").rglob("*.py"):
        if path.parent.name == "stages":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "StageFile"
                and any(isinstance(a, ast.Constant) and a.value in names for a in node.args)
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_each_stage_checks_its_own_settings_before_the_first_call(tmp_path, sim_url, monkeypatch):
    """Issue 49: run/rundir.py checked the pairs stage's strategies, the persona source and the
    retriever itself. Each stage's `preflight` does now, and the run calls every one before
    any stage runs: one that refuses its settings stops the build with nothing written."""
    import dataclasses

    import pipeline.stages as registry
    from pipeline.errors import PrbError

    assert {s.name for s in registry.stages() if s.preflight} >= {"personas", "questions", "pairs"}

    def refuse(cfg):
        raise PrbError(f"answer_screen: cannot screen run {cfg.run_id}")

    original = registry.stages()
    screened = tuple(
        dataclasses.replace(s, preflight=refuse) if s.name == "filters" else s for s in original
    )
    monkeypatch.setattr(registry, "stages", lambda: screened)
    config = write_config(tmp_path, sim_url, personas={"per_category": 2})
    with pytest.raises(PrbError, match="answer_screen: cannot screen run demo"):
        build(config)
    assert not (tmp_path / "outputs" / "demo" / "personas.jsonl").exists()
    rundir = (REPO / "pipeline" / "run" / "rundir.py").read_text()
    assert "strategies" not in rundir and "retriev" not in rundir and ".validate(" not in rundir
