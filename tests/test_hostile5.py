"""Hostile round 5 (issue 48): what a hostile or careless user found, one test per class."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_config
from pipeline.personas.files import scan_records

POST = {"id": "a", "category": "c", "text": "t"}
ALIAS_BOMB = """a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def test_a_config_of_nested_aliases_is_refused_in_a_blink(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 400
    start = time.monotonic()
    said = r"bomb.yaml: malformed YAML at line 1: its aliases expand to over 100,000"
    with pytest.raises(ConfigError, match=said):
        load_config(bomb)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("key", ["[a, b]", "{a: 1}"])
def test_a_list_or_mapping_as_a_config_key_is_one_line(tmp_path, key):
    config = tmp_path / "odd.yaml"
    config.write_text(f"run_id: a\n{key}: 1\n")
    with pytest.raises(ConfigError, match="odd.yaml: malformed YAML at line 2: a key must be a"):
        load_config(config)


def test_a_persona_record_with_a_key_twice_is_refused_naming_the_line(tmp_path):
    persona = {"persona_id": "p1", "category": "c", "profile": [POST]}
    line = json.dumps(persona)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(line + "\n" + line[:-1] + ', "name": "Ann", "name": "Bob"}\n')
    records, problems = scan_records(twice)
    assert len(records) == 1
    assert problems == [f"{twice}:2: the key 'name' is given twice: keep one"]
    yaml_twice = tmp_path / "twice.yaml"
    yaml_twice.write_text("- persona_id: p1\n  name: Ann\n  name: Bob\n")
    _, problems = scan_records(yaml_twice)
    assert len(problems) == 1 and "the key 'name' is given twice" in problems[0], problems


def test_a_persona_jsonl_with_a_byte_order_mark_reads_like_csv_and_json_do(tmp_path):
    persona = {"persona_id": "p1", "category": "c", "profile": [POST]}
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(persona).encode() + b"\n")
    records, problems = scan_records(bom)
    assert problems == [] and records[0][1]["persona_id"] == "p1"


# --- foreign text: one escaping function per format -------------------------------------------

HOSTILE = "\x1b]0;PWNED\x07\x1b[31m[/red][x](javascript:alert(1))<script>|`"


def test_markdown_of_foreign_text_is_inert():
    """A foreign category `[x](javascript:alert(1))` became a live link in leaderboard.md and
    ESC reached summary.md; the card's heading took `<script>` raw (issue 48)."""
    import pandas as pd

    from pipeline.eval.report import to_markdown
    from pipeline.reports import md

    out = md(HOSTILE)
    assert "\x1b" not in out and "\x07" not in out and "\\x1b" in out
    assert "](" not in out.replace("\\](", "") and "\\[x\\]" in out
    assert "<script>" not in out and "&lt;script&gt;" in out
    board = to_markdown(pd.DataFrame({"category": [HOSTILE], "accuracy": [0.5]}), "t")
    assert "[x](javascript" not in board and "\x1b" not in board


def test_the_card_heading_escapes_the_release_name(tmp_path):
    from pipeline.reports import md

    assert md("prb-demo-lamp-prb-recipe") == "prb-demo-lamp-prb-recipe"  # names as shipped
    assert md("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_prb_show_never_sends_a_foreign_escape_to_the_terminal():
    from io import StringIO

    from rich.console import Console

    from pipeline.audit.show import inert

    held = inert({"narrative": f"line one\n{HOSTILE}", "tags": [HOSTILE]})
    assert held["narrative"].startswith("line one\n")  # line breaks kept
    buffer = StringIO()
    Console(file=buffer, force_terminal=True).print(held["narrative"], markup=False)
    assert "\x1b]0;" not in buffer.getvalue() and "\x07" not in buffer.getvalue()


# --- bad values: one line, never a traceback ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("model:\n  timeout_s: .inf\n", "model.timeout_s: Input should be a finite number"),
        ("filters:\n  max_length_ratio: .nan\n", "max_length_ratio: Input should be a finite"),
        ("model: 5\n", "model: a section of settings (a mapping), not a int"),
    ],
)
def test_a_config_value_out_of_type_or_range_is_one_line(tmp_path, text, said):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_config(config, model__base_url="http://127.0.0.1:9/v1")


def test_a_bad_progress_interval_is_one_line(monkeypatch):
    from pipeline.errors import PrbError
    from pipeline.progress import INTERVAL_ENV, interval_from_env

    for bad in ("abc", "0", "-1", "inf", "nan"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        with pytest.raises(PrbError, match="PRB_PROGRESS_SECONDS="):
            interval_from_env()
    monkeypatch.setenv(INTERVAL_ENV, "2.5")
    assert interval_from_env() == 2.5


def test_verify_answers_a_malformed_manifest_or_row_with_findings(tmp_path):
    from pipeline.errors import PrbError
    from pipeline.release.publish import check_pairs, verify

    with pytest.raises(PrbError, match="no such release folder"):
        verify(tmp_path / "nonexistent")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "manifest.json").write_text("[]")
    assert verify(tmp_path / "r") == ["manifest.json: a JSON object expected, not a list"]
    (tmp_path / "r" / "manifest.json").write_text('{"files": ["a"]}')
    assert "manifest.json: `files` must map each file to its SHA-256" in verify(tmp_path / "r")
    row = {"id": "x", "persona_id": "p", "question": "q?", "chosen": "a", "rejected": "b"}
    assert check_pairs({"c": [row]}) == [
        "c row 0 (id 'x'): no readable prompt_versions, so no id to check"
    ]


def test_personas_commands_print_markup_in_ids_as_text(tmp_path):
    import subprocess
    import sys

    from conftest import prefect_env

    bad = tmp_path / "p.jsonl"
    bad.write_text(
        json.dumps({"persona_id": "[/red]x", "category": "[bold]", "profile": []}) + "\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "personas", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env=prefect_env(),
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout and "[/red]x" in done.stdout


def test_a_terminated_reward_server_takes_its_simulator_with_it(tmp_path):
    """uvicorn re-raises the SIGTERM it drained on: the default handler killed prb there, and
    its simulator child ran on, reparented and still answering (issue 48)."""
    import signal
    import subprocess
    import sys

    from conftest import answering, prefect_env
    from test_crash import kill_group

    from pipeline.serving import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "reward-server", "--rm", "length", "--sim"]
        + ["--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=prefect_env(),
        start_new_session=True,
    )
    try:
        answering(proc, f"http://127.0.0.1:{port}/health")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert children, "the simulator runs as a child"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "error" not in err, err  # a stop, not a failure
    for child in children:
        assert (
            not Path(f"/proc/{child}").exists()
            or "zombie" in Path(f"/proc/{child}/status").read_text().lower()
        ), f"the simulator {child} outlived its reward server"


def test_the_resume_line_repeats_the_endpoint_that_was_given(tmp_path, sim_factory):
    """Run as printed, a resume line without the `--base-url` given found no endpoint (exit 5)."""
    import subprocess
    import sys

    from conftest import prefect_env, write_config

    url = sim_factory(rate_429=0.7, retry_after="99999999", fault_tasks="rejected")
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", personas={"per_category": 4})
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "build", "--config", str(config)]
        + ["--base-url", url],
        capture_output=True,
        text=True,
        timeout=300,
        env=prefect_env(),
    )
    assert done.returncode == 7, done.stderr[-1000:]
    last = done.stderr.strip().splitlines()[-1]
    assert f"rerun `prb build --config {config} --base-url {url} --run-id demo`" in last, last


@pytest.mark.parametrize(
    ("records", "said"),
    [
        ([{"data": {}, "annotations": [{"result": "nope"}]}], "task 1 is not as Label Studio"),
        ([{"data": {}, "annotations": 5}], "task 1 is not as Label Studio"),
        ([{"fields": {}, "responses": {"preference": 5}}], "record 1 is not as Argilla"),
        ([{"fields": {}, "responses": ["x"]}], "record 1 is not as Argilla"),
    ],
)
def test_malformed_label_studio_or_argilla_json_is_one_line(tmp_path, records, said):
    from pipeline.annotation.formats import read_labels
    from pipeline.annotation.layout import AnnotationError

    path = tmp_path / "labels.json"
    path.write_text(json.dumps(records))
    with pytest.raises(AnnotationError, match=said):
        read_labels(path)


def test_eval_rl_without_its_extras_names_the_install(tmp_path, monkeypatch):
    """`prb eval rl --sim` without the rl extra was a ModuleNotFoundError (exit 70)."""
    import sys

    from pipeline.rl.train import RLError, run

    monkeypatch.setitem(sys.modules, "trl", None)  # as if TRL were not installed
    with pytest.raises(RLError, match=r"pip install '\.\[hf,rl\]'"):
        run("r", ["length"], None, tmp_path, tmp_path / "out")


def test_rm_specs_take_the_helps_grammar_and_refuse_unknown_options():
    """`--rm random,seed=3` (KIND[,key=value…]) was an "unknown kind", and `judge:modle=x` was
    scored with the config's judge, the typo ignored (issue 48)."""
    from pipeline.eval.models import parse_spec
    from pipeline.eval.rewards import SpecError

    rm = parse_spec("random,seed=3", llm=None, judge_model="j", context="profile")
    assert (rm.kind, rm.seed) == ("random", 3)
    assert parse_spec("random:seed=3", llm=None, judge_model="j", context="profile").seed == 3
    with pytest.raises(SpecError, match="unknown option 'modle'; judge takes: context, model"):
        parse_spec("judge:modle=x", llm=None, judge_model="j", context="profile")
    with pytest.raises(SpecError, match="unknown option 'seed'; length takes: context"):
        parse_spec("length,seed=1", llm=None, judge_model="j", context="profile")


def test_an_import_source_with_many_bad_records_is_one_line(tmp_path):
    """Many problems printed as one 3 KB line of literal `\\n` (issue 48): the first, and a
    count of the rest."""
    from pipeline.errors import PrbError
    from pipeline.personas.importer import load_external

    bad = tmp_path / "users.jsonl"
    bad.write_text("\n".join(json.dumps({"question": "q?", "id": str(i)}) for i in range(5)))
    with pytest.raises(PrbError) as e:
        load_external(str(bad))
    said = str(e.value)
    assert "\n" not in said and "\\n" not in said and "record 1" in said, said
    assert said.endswith("(and 4 more like it)"), said


def test_paths_that_are_not_there_or_not_folders_are_named_as_such(tmp_path):
    """`annotate status /nonexistent` said "not a safe name"; `release diff REL file.jsonl`
    said "no such release folder" of a file (issue 48)."""
    from conftest import prb

    done = prb("annotate", "status", "/nonexistent", cwd=tmp_path)
    assert done.returncode == 2 and "/nonexistent: no such run folder" in done.stderr
    (tmp_path / "rel.jsonl").write_text("{}\n")
    (tmp_path / "old").mkdir()
    done = prb("release", "diff", "rel.jsonl", "old", cwd=tmp_path)
    assert done.returncode == 2 and "a file, not a release folder" in done.stderr, done.stderr


def test_the_progress_line_moves_while_a_stage_calls_before_its_records():
    """The filters stage's qualification (judge calls before its first record) left the line
    at "pairs 10/10 … elapsed 06:01" for minutes (issue 48)."""
    from pipeline import progress

    counts = {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0}
    usage = {"pairs": {**counts, "calls": 30}, "filters": {**counts}}
    with progress.showing(interval=3600) as shown:
        progress.watch_usage(lambda: usage)
        pairs = progress.stage("pairs", total=10)
        pairs.done = 10
        pairs.finish()
        assert "pairs 10/10 records" in shown.line()
        usage["filters"] |= {"calls": 12, "prompt_tokens": 900, "completion_tokens": 100}
        assert "filters: 12 calls, 1,000 tokens before its records" in shown.line()
        usage["filters"]["calls"] = 13
        assert "filters: 13 calls" in shown.line()


def test_every_command_runs_under_the_one_line_error_handler():
    """`prb personas validate|stats` were not under it: a `[/red]` in an id was a rich
    MarkupError traceback (issue 48). A command added without `@guarded` fails here."""
    from pipeline.cli import app

    def commands(t, prefix=""):
        for c in t.registered_commands:
            yield prefix + (c.name or c.callback.__name__), c.callback
        for g in t.registered_groups:
            yield from commands(g.typer_instance, f"{prefix}{g.name} ")

    found = dict(commands(app))
    assert {"build", "demo", "sim-server", "personas validate", "eval rl"} <= set(found)
    unwrapped = sorted(n for n, cb in found.items() if getattr(cb, "__wrapped__", None) is None)
    assert unwrapped == [], f"not under cli.common.guarded: {unwrapped}"


def test_validating_a_lamp_qa_folder_says_what_it_is_once_per_file():
    """`prb personas validate personas/lamp-qa` gave 204 schema errors ("Extra inputs are not
    permitted") for three well-formed LaMP-QA files (issue 48): one line per file now, saying
    what the file is and how a build reads it."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    lamp = Path(__file__).resolve().parent.parent / "personas" / "lamp-qa"
    done = CliRunner().invoke(app, ["personas", "validate", str(lamp)])
    assert done.exit_code == 1
    said = [x for x in done.output.splitlines() if ": error: " in x]
    assert len(said) == 3 and all("LaMP-QA's format" in x and "_test.json" in x for x in said)
    assert "Extra inputs" not in done.output and "3 errors" in done.output


@pytest.mark.parametrize("args", [("--help",), ("personas", "stats")])
def test_a_reader_that_stops_reading_ends_prb_quietly(args):
    """`prb … | head` made prb exit 1 with no word (issue 48): a closed pipe ends prb as it
    ends any Unix tool, 141 and nothing on stderr."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before prb writes a byte
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr.decode()
    assert done.stderr == b""


HOSTILE = "\x1b]0;PWNED\x07\x1b[31m[/red][x](javascript:alert(1))<script>"


def test_every_command_reading_a_release_shows_its_foreign_text_inert(tmp_path):
    """Issue 48's mechanism: every string field of a foreign release carries a terminal
    escape, rich markup, a Markdown link and HTML; each command that reads a release answers
    without a raw escape on the terminal, a crash or a live link in the Markdown it writes."""
    from conftest import prb
    from public_releases import controlled

    rows = controlled()
    for n, r in enumerate(rows):
        for field in ("question", "chosen", "rejected", "category", "narrative"):
            r[field] = f"{r[field]}{HOSTILE}"
        r["rubric_aspects"] = [f"{a}{HOSTILE}" for a in r["rubric_aspects"]]
        r["id"] = f"{r['id']}{HOSTILE}" if n % 2 else r["id"]
        for item in r.get("profile") or []:
            item["text"] = f"{item['text']}{HOSTILE}"
    release = tmp_path / "r.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in rows))
    other = tmp_path / "o.jsonl"
    other.write_text("\n".join(json.dumps(r) for r in rows[: len(rows) // 2]))
    commands = {
        "audit": ("audit", str(release), "--out", str(tmp_path / "audit")),
        "compare": ("compare", str(release), str(other), "--out", str(tmp_path / "compare")),
        "verify": ("release", "verify", str(release)),
        "diff": ("release", "diff", str(release), str(other)),
        "eval": ("eval", str(release), "--rm", "length", "--out", str(tmp_path / "eval")),
    }
    for name, args in commands.items():
        done = prb(*args, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode != 70 and "Traceback" not in said, (name, said[-2000:])
        assert "\x1b" not in said and "\x07" not in said, (name, said[-2000:])
    for md in tmp_path.rglob("*.md"):
        text = md.read_text(encoding="utf-8")
        # a link is live only where its brackets are not escaped
        assert not re.search(r"(?<!\\)\]\(javascript:", text) and "\x1b" not in text, md
        assert "<script>" not in text, md


@pytest.mark.parametrize(
    ("command", "name", "signals"),
    [
        (["sim-server"], "the simulator", ["SIGTERM"]),
        (["sim-server"], "the simulator", ["SIGINT", "SIGINT"]),  # an impatient Ctrl-C
        (["reward-server", "--rm", "length"], "the reward server", ["SIGINT"]),
    ],
)
def test_an_idle_server_says_in_one_line_that_it_stopped(command, name, signals):
    """A server stopped with nothing in flight printed nothing, and a second Ctrl-C printed
    the app's cancelled lifespan as a traceback (issue 48)."""
    import signal
    import subprocess
    import sys

    from conftest import answering, prefect_env

    from pipeline.serving import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *command, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=prefect_env(),
    )
    try:
        answering(proc, f"http://127.0.0.1:{port}/health")
        for sig in signals:
            proc.send_signal(getattr(signal, sig))
            time.sleep(0.05)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert err.strip().splitlines() == [f"{name} stopped by {signals[0]}: no request was running"]
    number = getattr(signal, signals[0])
    if len(signals) == 1:  # where a second Ctrl-C lands (a handler, the runner, the exit) decides
        assert proc.returncode in (128 + number, -number), err  # a shell shows both as 128 + n
