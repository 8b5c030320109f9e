"""Hostile round 4 (issue 38): what a hostile or careless user found, one test per class."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from conftest import prb, prefect_env
from public_releases import controlled, write_hub_layout

from pipeline.eval.rewards import RewardModel

ESC = "\x1b[2J\x1b]0;owned\x07"


def test_release_diff_and_verify_never_print_a_foreign_id_raw(tmp_path):
    rows = [{**r, "persona_id": r["id"].rsplit("-", 1)[0]} for r in controlled()]
    old = write_hub_layout(tmp_path / "old", rows)
    hostile = [dict(r) for r in rows]
    hostile[0]["id"] = f"evil{ESC}"
    hostile[1]["id"] = f"evil{ESC}"  # a duplicate: verify names it
    new = write_hub_layout(tmp_path / "new", hostile)
    for done in (prb("release", "diff", str(old), str(new)), prb("release", "verify", str(new))):
        out = done.stdout + done.stderr
        assert "\x1b" not in out and "\x07" not in out, out[-500:]
    assert "evil\\x1b[2J\\x1b]0;owned\\x07" in prb("release", "diff", str(old), str(new)).stdout


@dataclass
class OddRM(RewardModel):
    """A reward model (as a plugin might write one) whose scores are NaN, ±inf or missing."""

    scores_for: Callable = lambda qs: []

    async def score_many(self, queries):
        return self.scores_for(queries)


def test_nan_inf_or_missing_scores_are_errors_with_reasons_in_eval_and_the_reward_server(
    tmp_path, sim_url
):
    import asyncio
    import json
    import math

    from conftest import write_config

    from pipeline.config import load_config
    from pipeline.eval.evaluate import metrics, score_pairs
    from pipeline.records import RewardItem
    from pipeline.rl.server import Scorer

    rows = controlled()[:4]
    odd = [
        lambda qs: [math.nan, 1.0],
        lambda qs: [math.inf, 1.0],
        lambda qs: [1.0, -math.inf],
        lambda qs: [],
    ]
    for scores_for in odd:
        scored = asyncio.run(score_pairs(OddRM("odd", scores_for=scores_for), rows))
        assert all(s.error and not s.won for s in scored), scored
        assert all(s.score_chosen is None and s.score_rejected is None for s in scored)
        found = metrics(scored)
        assert found["errors"] == len(rows) and found["accuracy"] == 0.0
        json.dumps([s.model_dump() for s in scored], allow_nan=False)
    reasons = [asyncio.run(score_pairs(OddRM("odd", scores_for=f), rows))[0].error for f in odd]
    assert "not a finite number" in reasons[0] and "0 scores for 2 items" in reasons[3]

    scorer = Scorer("length", load_config(write_config(tmp_path, sim_url)))
    item = RewardItem(question="Q?", profile=[], response="An answer.")
    try:
        scorer.rm = OddRM("odd", scores_for=lambda qs: [])
        empty = asyncio.run(scorer.score([item]))
        assert empty.scores == [None] and "0 scores for 1 items" in empty.errors[0]
        scorer.rm = OddRM("odd", scores_for=lambda qs: [math.nan, 2.0])
        nan = asyncio.run(scorer.score([item, item]))
        assert nan.scores == [None, 2.0] and "nan" in nan.errors[0]
        json.dumps(nan.model_dump(), allow_nan=False)
    finally:
        asyncio.run(scorer.aclose())


def test_the_simulator_accepts_the_protocols_and_answers_bad_bodies_400(sim_url):
    import httpx

    base = sim_url.removesuffix("/v1")
    model = httpx.get(f"{sim_url}/models").json()["data"][0]["id"]
    parts = {"type": "text", "text": "<question>How do I start running?</question>"}
    chat = {"model": model, "messages": [{"role": "user", "content": [parts]}]}
    done = httpx.post(f"{sim_url}/chat/completions", json=chat, timeout=30)
    assert done.status_code == 200 and done.json()["choices"][0]["message"]["content"]
    blocks = {
        "model": model,
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Answer briefly."}],
        "messages": [{"role": "user", "content": [parts]}],
    }
    done = httpx.post(
        f"{base}/v1/messages", json=blocks, headers={"anthropic-version": "2023-06-01"}, timeout=30
    )
    assert done.status_code == 200 and done.json()["content"][0]["text"]
    for body in (b"{not json", b"[1, 2]", b'{"model": "x", "messages": "hi"}'):
        done = httpx.post(
            f"{sim_url}/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert done.status_code == 400, (body, done.status_code, done.text[:200])
        assert "Traceback" not in done.text and done.json()["error"]["message"]
    done = httpx.post(
        f"{base}/v1/messages",
        content=b"[]",
        headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert done.status_code == 400 and done.json()["type"] == "error"


def test_sim_server_options_out_of_range_are_one_usage_line():
    for args in (
        ["--port", "99999"],
        ["--port", "x"],
        ["--latency-ms", "nan"],
        ["--rate-500", "-1"],
    ):
        done = prb("sim-server", *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-500:]
        assert args[0] in done.stderr.splitlines()[-1]


def test_a_release_with_wrong_typed_columns_is_refused_naming_the_column(tmp_path):
    import json

    for column, value, said in (
        ("chosen", 7, "'chosen' is int, not text"),
        ("category", None, "'category' is null, not text"),
    ):
        rows = [{**r, column: value} for r in controlled()[:21]]
        path = tmp_path / f"{column}.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        for args in (("audit", str(path), "--out", str(tmp_path / "a")), ("eval", str(path))):
            done = prb(*args, "--rm", "length") if args[0] == "eval" else prb(*args)
            assert done.returncode == 2, (args, done.stderr[-300:])
            assert said in done.stderr and "Traceback" not in done.stderr


def test_an_id_naming_many_pairs_is_listed_once_with_its_count(tmp_path):
    import json

    from pipeline.release.load import load_rows

    rows = controlled()[:8]
    for r in rows[:4]:
        r["id"] = "same"
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    _, info = load_rows(path)
    said = [w for w in info["warnings"] if "ids name two different pairs" in w]
    assert said == ["3 ids name two different pairs (the later renamed ID#2): 'same' (x3)"], said


def test_a_base_url_that_is_not_http_is_refused_at_the_config_check(tmp_path):
    import time

    import yaml
    from conftest import write_config

    for url in ("not a url", "file:///etc/passwd", "http://", "http://host:99999/v1"):
        config = write_config(tmp_path, url)
        started = time.monotonic()
        done = prb("build", "--config", str(config))
        assert done.returncode == 2 and time.monotonic() - started < 60, done.stderr[-300:]
        last = done.stderr.strip().splitlines()[-1]
        assert "base_url" in last and str(config) in last, last
        assert yaml.safe_load(config.read_text())["model"]["base_url"] == url


def test_a_bad_host_is_a_usage_error_and_one_beyond_loopback_is_warned_about_once(caplog):
    import logging

    import pytest

    from pipeline import serving
    from pipeline.errors import PortInUse

    done = prb("reward-server", "--rm", "length", "--sim", "--host", "not a host", "--port", "8999")
    assert done.returncode == 2 and "--host 'not a host'" in done.stderr, done.stderr[-300:]
    with caplog.at_level(logging.WARNING, logger="prb"):
        for _ in range(2):
            serving.bind("0.0.0.0", 0).close()
        serving.bind("127.0.0.1", 0).close()
    said = [r.getMessage() for r in caplog.records if "beyond loopback" in r.getMessage()]
    assert len(said) == 1 and "0.0.0.0" in said[0]
    with pytest.raises(serving.BadHost):
        serving.bind("256.1.1.1", 0)
    assert not issubclass(serving.BadHost, PortInUse)


def test_the_null_test_is_bounded_and_shows_its_progress(tmp_path):
    import json

    release = tmp_path / "r.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in controlled()))
    huge = prb("audit", str(release), "--null", "100000", "--out", str(tmp_path / "a"))
    assert huge.returncode == 2 and "--null" in huge.stderr and "Traceback" not in huge.stderr
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "audit", str(release), "--null", "3"]
        + ["--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=300,
        env=prefect_env(PRB_PROGRESS_SECONDS="0.05"),
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert "null test" in done.stderr, done.stderr[-500:]


def test_the_limit_below_one_request_is_said_once_whatever_each_request_costs():
    import io

    from rich.console import Console

    from pipeline import progress
    from pipeline.llm.ratelimit import Limiter

    out = io.StringIO()
    with progress.showing(Console(file=out, width=300), interval=3600):
        limiter = Limiter(tokens_per_minute=10, learn=False)
        for cost in range(500, 516):  # 16 concurrent requests of slightly different sizes
            limiter._pace(cost)
    assert out.getvalue().count("is below one request") == 1, out.getvalue()


def test_a_second_build_of_a_run_being_built_is_refused_before_prefect_starts(tmp_path, sim_url):
    import time

    from conftest import write_config
    from test_crash_lock import holding

    config = write_config(tmp_path, sim_url, personas={"per_category": 2})
    with holding(tmp_path / "outputs" / "demo") as holder:
        started = time.monotonic()
        env = prefect_env()
        env.pop("PREFECT_API_URL", None)  # prb would start its own Prefect server: seconds
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "build", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        took = time.monotonic() - started
    assert done.returncode == 3 and f"pid {holder.pid}" in done.stderr, done.stderr[-300:]
    assert "prefect" not in done.stderr.lower()  # refused before Prefect's server started
    assert took < 12, took


def test_a_build_that_loses_most_records_to_refused_requests_exits_7(tmp_path, sim_factory):
    from conftest import write_config

    url = sim_factory(context_limit=420)  # most planner prompts are over it
    config = write_config(tmp_path, url, personas={"per_category": 4})
    done = prb("build", "--config", str(config))
    assert done.returncode == 7, (done.returncode, done.stdout[-800:], done.stderr[-500:])
    last = done.stderr.strip().splitlines()[-1]
    assert "planner_bad_request" in last and "endpoint refused requests" in last, last
    assert "release:" in done.stdout  # what was made is written and said before the exit


def test_a_config_with_a_key_twice_or_a_huge_value_is_one_line_naming_where(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("run_id: a\nmodel:\n  generator: x\nrun_id: b\n")
    done = prb("build", "--config", str(twice))
    assert done.returncode == 2
    said = "twice.yaml: malformed YAML at line 4: the key 'run_id' is given twice (first on line 1)"
    assert said in done.stderr, done.stderr
    huge = tmp_path / "huge.yaml"
    huge.write_text("run_id: a\npersonas:\n  source: " + "x" * 50_000_000 + "\n")
    done = prb("build", "--config", str(huge))
    assert done.returncode == 2 and "huge.yaml: 50,000,0" in done.stderr, done.stderr[-300:]
    long = tmp_path / "long.yaml"
    long.write_text("run_id: a\npersonas:\n  source: " + "x" * 5000 + "\n")
    done = prb("build", "--config", str(long))
    assert done.returncode == 2 and "long.yaml: personas.source: a value over" in done.stderr


def test_every_numeric_option_declares_its_range_and_refuses_what_lies_outside():
    """The sweep (issue 38): every int or float option of every command declares a min and a
    max, and NaN, ±inf, below-min, above-max and wrong-typed values each exit 2 with one usage
    line naming the option, in-process (fast), never a traceback or a silent acceptance."""
    from test_hostile3 import _commands
    from typer.testing import CliRunner

    from pipeline.cli import app

    runner = CliRunner()
    unbounded, tried = [], 0
    for path, cmd in _commands():
        for p in cmd.params:
            if p.type_descriptor.annotation not in (int, float) or not p.opts[0].startswith("--"):
                continue
            name = p.opts[0]
            lo, hi = p.min, p.max
            if lo is None or hi is None:
                unbounded.append(f"{' '.join(path)} {name}")
                continue
            bad = ["nan", "inf", "-inf", "abc", str(lo - 1), str(hi + 1), "1e400"]
            for value in bad:
                result = runner.invoke(app, [*path, name, value])
                tried += 1
                assert result.exit_code == 2, (path, name, value, result.output[-300:])
                assert name in result.output and "Traceback" not in result.output
    assert not unbounded, f"numeric options with no declared range: {unbounded}"
    assert tried >= 100


def test_release_verify_lists_wrong_typed_null_or_missing_answers_not_a_bug(tmp_path, sim_url):
    import shutil
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import build, write_config

    made = Path(build(write_config(tmp_path, sim_url, personas={"per_category": 2}))["release_dir"])

    def spoiled(name: str, change) -> Path:
        folder = tmp_path / name
        shutil.copytree(made, folder)
        for f in folder.glob("*/*.parquet"):
            pq.write_table(change(pq.read_table(f)), f)
        return folder

    def column(t: pa.Table, name: str, values: pa.Array) -> pa.Table:
        return t.set_column(t.schema.get_field_index(name), name, values)

    cases = {
        "'chosen' is int": lambda t: column(t, "chosen", pa.array(range(t.num_rows), pa.int64())),
        "'chosen' is NoneType": lambda t: column(t, "chosen", pa.nulls(t.num_rows, pa.string())),
        "'rejected' is missing": lambda t: t.drop_columns(["rejected"]),
    }
    for k, (said, change) in enumerate(cases.items()):
        done = prb("release", "verify", str(spoiled(f"case{k}", change)))
        assert done.returncode == 1, (said, done.returncode, done.stderr[-400:])
        assert said in done.stdout and "internal error" not in done.stderr, done.stdout[-400:]


def test_a_release_with_an_empty_category_or_a_column_in_one_file_loads_with_warnings(tmp_path):
    """A hub-layout release with one category file of 0 rows, or one file with a column the
    others lack, used to be unreadable whole ("BatchSize must be greater than 0", ~80 lines of
    Arrow schema, "cannot load config"): each is one warning, and the rest is audited."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = controlled()
    for name, change, said in (
        ("empty", lambda t: t.slice(0, 0), "has no rows (skipped)"),
        (
            "extra",
            lambda t: t.append_column("source", pa.array(["x"] * t.num_rows)),
            "column 'source' is only in 1 of 2 files",
        ),
    ):
        release = write_hub_layout(tmp_path / name, rows)
        first = sorted(release.glob("*/test-*.parquet"))[0]
        pq.write_table(change(pq.read_table(first)), first)
        kept = sum(1 for r in rows if r["category"] != first.parent.name)
        done = prb("audit", str(release), "--out", str(tmp_path / f"audit-{name}"))
        assert done.returncode == 0, done.stderr[-500:]
        shown = " ".join(done.stdout.split())  # the terminal wraps lines
        assert said in shown and "Traceback" not in done.stderr
        assert f"{kept if name == 'empty' else len(rows)} pairs read" in shown
        assert len(done.stderr.splitlines()) < 10  # no Arrow schema dump


def test_a_parquet_release_with_an_all_null_column_reads_none_not_nan(tmp_path):
    """pandas read an all-null string column as NaN: `rejected_for` NaN is truthy, joined every
    pair into one user group, and the classifier had no folds (n/a on a leaky release)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline import probes
    from pipeline.release.load import load_rows

    rows = [{**r, "rejected_for": None} for r in controlled()]
    table = pa.Table.from_pylist(rows)
    column = table.schema.get_field_index("rejected_for")  # a string column, as prb writes it
    table = table.set_column(column, "rejected_for", pa.nulls(len(rows), pa.string()))
    pq.write_table(table, tmp_path / "release.parquet")
    loaded, _ = load_rows(tmp_path / "release.parquet")
    assert all(r["rejected_for"] is None for r in loaded)
    assert all(isinstance(r["profile"], list) for r in loaded)
    assert probes.classifier_probe(loaded).value is not None


PEAK = """
import atexit, runpy, sys
from pipeline.meter import peak_rss_gib
atexit.register(lambda: sys.stderr.write(f"\\npeak-gib {peak_rss_gib()}\\n"))
sys.argv = ["prb", *sys.argv[1:]]
runpy.run_module("pipeline.cli", run_name="__main__")
"""


def test_a_ten_megabyte_answer_is_left_out_with_a_warning_not_measured_in_gigabytes(tmp_path):
    """A 10 MB answer cost 1.7 GB of memory (the char n-grams of one text) to audit; such a
    pair is no benchmark pair: it is left out with one warning, and the audit stays small."""
    import json

    rows = controlled()
    rows[0]["chosen"] = "word " * 2_000_000
    path = tmp_path / "huge.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    done = subprocess.run(
        [sys.executable, "-c", PEAK, "audit", str(path), "--out", str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=300,
        env=prefect_env(),
    )
    assert done.returncode == 0, done.stderr[-500:]
    shown = " ".join(done.stdout.split())
    assert f"{len(rows) - 1} pairs read (of {len(rows)} rows)" in shown
    assert "over 100,000 characters" in shown and rows[0]["id"] in shown
    peak_mib = float(done.stderr.split("peak-gib")[-1].split()[0]) * 1024
    assert peak_mib < 700, peak_mib


def test_the_simulators_batch_api_accepts_content_parts_and_names_a_bad_line(sim_url, tmp_path):
    """The batch path read `content` as a string only: a request whose messages carry text
    parts (valid for the Batch API as for chat) made the batch fail; a line that is no chat
    body is that line's error, naming what is wrong, and the other lines are answered."""
    import json
    import time

    import openai

    client = openai.OpenAI(base_url=sim_url, api_key="sk-test", max_retries=0)
    parts = [{"type": "text", "text": "How do I start "}, {"type": "text", "text": "running?"}]
    lines = [
        {"custom_id": "parts", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "prb-sim-1", "messages": [{"role": "user", "content": parts}]}},
        {"custom_id": "broken", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "prb-sim-1", "messages": [{"role": "user", "content": 7}]}},
    ]  # fmt: skip
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with open(path, "rb") as f:
        uploaded = client.files.create(file=f, purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    out = {}
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id:
            for line in client.files.content(file_id).text.splitlines():
                row = json.loads(line)
                out[row["custom_id"]] = row
    answer = out["parts"]["response"]["body"]["choices"][0]["message"]["content"]
    assert isinstance(answer, str) and answer.strip()
    assert out["broken"]["response"] is None
    assert "messages[0]" in out["broken"]["error"]["message"]
