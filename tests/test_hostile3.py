"""Hostile round 3 (issue 29): text survives every file format, reports are safe on foreign
data, provenance comes from what happened, servers stop, no tracebacks, misbehaving endpoints,
validation. One section per class; each test fails on the code before the fix."""

from __future__ import annotations

import csv
import io
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import PRB, REPO, build, prefect_env, write_config
from hypothesis import given, settings
from hypothesis import strategies as st
from public_releases import controlled
from test_hostile import one_line, prb

from pipeline import csvfile
from pipeline.serving import free_port

# --- 1. CSV as a format, not as lines ---------------------------------------------------------

BREAKS = ["\n", "\r\n", "\r", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x00", "\x1e"]
cells = st.one_of(
    st.text(),
    st.lists(
        st.sampled_from([*BREAKS, "=", "+", "-", "@", "\t", "'", '"', ",", "a", "é"]), max_size=12
    ).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(cells, min_size=3, max_size=3), min_size=1, max_size=5))
def test_any_text_in_any_cell_round_trips_and_no_cell_is_a_formula(rows):
    header = ["item_id", "reason", "answer_a"]
    text = csvfile.dumps(header, rows)
    back = [[row[h] for h in header] for _, row in csvfile.read(text)[1]]
    assert back == [r for r in rows if any(r)]  # a row of empty cells is a blank row
    # what a spreadsheet reads: no cell it would evaluate
    for record in csv.reader(io.StringIO(text, newline="")):
        assert not any(c.startswith(csvfile.FORMULA) for c in record)


def test_an_annotators_reason_with_line_breaks_imports_unchanged(tmp_path, sim_url):
    """Excel's Alt+Enter puts a line break inside a cell; U+2028 used to be refused with a
    message about another export, LF to be imported as "line oneline two"."""
    from test_annotation import cfg as annotation_cfg
    from test_annotation import filters, truthful

    from pipeline.annotation.export import export
    from pipeline.annotation.importer import import_labels
    from pipeline.annotation.layout import CSV_COLUMNS, batches_dir, load_key, load_labels

    run_dir = _annotation_run(tmp_path, sim_url)
    export(filters(run_dir), "demo", annotation_cfg(), 1, ["ann-1"])
    key = load_key(run_dir)
    reason = 'line one\nline two\r\nthree\u2028four\u2029five\u0085six =HYPERLINK("x")'
    sheet = next(batches_dir(run_dir).glob("*/ann-1.csv"))
    rows = [row for _, row in csvfile.read(sheet.read_text(encoding="utf-8"))[1]]
    items = {i.item_id: i for i in key.items}
    for row in rows:
        row.update(truthful(items[row["item_id"]], "ann-1"), reason=reason)
    with open(sheet, "w", encoding="utf-8", newline="") as f:  # saved as a spreadsheet saves
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
    assert set(CSV_COLUMNS) <= set(rows[0])
    import_labels(run_dir, [sheet])
    labels = [lab for lab in load_labels(run_dir) if lab.preference != "tie"]
    assert labels and {lab.reason for lab in labels} == {reason}


def _annotation_run(tmp_path: Path, url: str) -> Path:
    from pipeline.errors import NothingReleased

    config = write_config(
        tmp_path, url, personas={"per_category": 1}, annotation={"required": True}
    )
    with pytest.raises(NothingReleased):
        build(config)
    return tmp_path / "outputs" / "demo"


# --- 2. reports are safe on foreign data -----------------------------------------------------

MARKUP = "<script>alert(1)</script><img src=x onerror=alert(2)>| `x` \n"


def _hostile_release(path: Path, n: int = 120) -> Path:
    rows = controlled(couples=n // 6)
    for r in rows:
        for key in ("question", "narrative", "chosen", "rejected"):
            r[key] = MARKUP + r[key]
        r["rejected"] += " (other)"
        r["category"] = "<script>cat()</script>"
        r["id"] = MARKUP.strip() + r["id"]
        for post in r["profile"]:
            post["text"] = MARKUP + post["text"]
        for aspect in r["rubric_aspects"]:
            aspect["aspect"] = MARKUP + aspect["aspect"]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return path


def test_audit_compare_and_eval_of_a_release_full_of_markup_write_no_raw_tag(tmp_path):
    release = _hostile_release(tmp_path / "hostile.jsonl")
    other = _hostile_release(tmp_path / "other.jsonl")
    for args in (
        ("audit", str(release), "--out", str(tmp_path / "audit")),
        ("compare", str(release), str(other), "--out", str(tmp_path / "compare")),
        (
            "eval",
            str(release),
            "--out",
            str(tmp_path / "eval"),
            "--bootstrap",
            "20",
            "--rm",
            "length",
        ),
    ):
        code, _, err = prb(*args, cwd=tmp_path)
        assert code == 0, err
    written = [p for p in tmp_path.rglob("*") if p.suffix in (".html", ".md")]
    assert {p.parent.name for p in written} >= {"audit", "compare", "eval"}
    for page in written:
        text = page.read_text(encoding="utf-8")
        for tag in ("<script", "<img src=x", "onerror=alert(2)>"):
            assert tag not in text, f"{page}: raw {tag}"
    board = (tmp_path / "eval" / "leaderboard.md").read_text()
    assert "acc_&lt;script&gt;cat()&lt;/script&gt;" in board


def test_leaderboard_csvs_neutralise_formula_cells(tmp_path):
    """pandas 3 stores text as `str`, not `object`: a check on `object` neutralised nothing."""
    import pandas as pd

    df = pd.DataFrame(
        {"model": ["=cmd|' /C calc'!A0", "ok"], "accuracy": [0.5, 0.6], "@category": ["+x", "-y"]}
    )
    csvfile.frame_csv(df, tmp_path / "board.csv")
    cells = [c for row in csv.reader((tmp_path / "board.csv").open(newline="")) for c in row]
    assert not any(c.startswith(csvfile.FORMULA) for c in cells), cells
    rows = [row for _, row in csvfile.read((tmp_path / "board.csv").read_text())[1]]
    assert [r["model"] for r in rows] == ["=cmd|' /C calc'!A0", "ok"]
    assert [r["@category"] for r in rows] == ["+x", "-y"]


# --- 3. integrity of foreign releases --------------------------------------------------------


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return path


def test_duplicates_identical_answers_and_too_few_pairs_are_reported_not_counted(tmp_path):
    from pipeline import probes
    from pipeline.release.load import ReleaseError, load_rows

    rows = controlled(couples=20)  # 120 pairs
    dup = _write(tmp_path / "dup.jsonl", rows + [dict(r) for r in rows[:5]])
    got, info = load_rows(dup)
    assert len(got) == 120 and info["rows"] == 125
    assert info["warnings"] == [info["warnings"][0]] and "5 rows repeat" in info["warnings"][0]

    same = [dict(r, rejected=r["chosen"]) for r in rows]
    with pytest.raises(ReleaseError, match="120 pairs have chosen identical to rejected"):
        load_rows(_write(tmp_path / "same.jsonl", same))
    code, _, err = prb("audit", str(tmp_path / "same.jsonl"), cwd=tmp_path)
    assert code == 2 and "identical" in one_line(err)

    few = probes.summary(probes.run_all(rows[:21]))
    assert few["verdict"] == "too few pairs" and few["leaks"] == []
    assert all(p["leak"] is None for p in few["probes"])
    mixed = rows[:100] + [dict(r, rejected=" ") for r in rows[100:110]]
    code, out, err = prb(
        "audit",
        str(_write(tmp_path / "mixed.jsonl", mixed)),
        "--out",
        str(tmp_path / "mixed"),
        cwd=tmp_path,
    )
    assert code == 0, err
    report = json.loads((tmp_path / "mixed" / "audit.json").read_text())
    assert report["pairs"] == 100 and report["rows"] == 110
    assert any("10 pairs have an empty" in w for w in report["warnings"])
    code, _, err = prb(
        "eval",
        str(tmp_path / "dup.jsonl"),
        "--rm",
        "length",
        "--bootstrap",
        "20",
        "--out",
        str(tmp_path / "ev"),
        cwd=tmp_path,
    )
    assert code == 0 and "warning: 5 rows repeat" in err


# --- 4. provenance from what happened --------------------------------------------------------


def test_a_simulator_build_that_claims_otherwise_says_simulated_and_push_refuses(tmp_path, sim_url):
    from pipeline.release.manifest import load
    from pipeline.release.publish import PushRefused, push

    config = write_config(tmp_path, sim_url, simulated=False, personas={"per_category": 1})
    release = Path(build(config)["release_dir"])
    manifest = load(release)
    assert manifest.simulated and manifest.served_by == ["prb-simulator"]
    assert "simulated" in (release / "README.md").read_text().split("---")[1]
    with pytest.raises(PushRefused, match="built on the simulator"):
        push(release, "me/prb")


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "- a\n- list\n", "42\n"])
def test_an_empty_or_non_mapping_config_is_an_error(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    code, _, err = prb("build", "--config", str(path), cwd=tmp_path)
    assert code == 2 and str(path) in one_line(err)


# --- 5. every server stops -------------------------------------------------------------------


def _wait_for(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def _stops_with_requests_in_flight(
    cmd: list[str], health: str, post: tuple[str, dict], sig: int, name: str
) -> float:
    """Seconds from the signal to the exit; and (issue 38) every request in flight got a 503
    with Retry-After, and the server printed one line, no traceback."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=prefect_env()
    )
    answers: list[httpx.Response | Exception] = []

    def call() -> None:
        try:
            answers.append(httpx.post(post[0], json=post[1], timeout=120))
        except httpx.HTTPError as e:
            answers.append(e)

    try:
        _wait_for(health, proc)
        threads = [threading.Thread(target=call, daemon=True) for _ in range(3)]
        for t in threads:  # requests that would take a minute
            t.start()
        time.sleep(1.0)
        started = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - started
        for t in threads:
            t.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [getattr(a, "status_code", a) for a in answers] == [503] * 3
    assert all(int(a.headers["retry-after"]) > 0 for a in answers)
    assert "Traceback" not in err and "Cancel" not in err, err
    assert err.strip().splitlines()[-1:] == [
        f"{name} stopped by {signal.Signals(sig).name}: 3 request(s) still running were "
        "answered 503 (Retry-After)"
    ], err
    return took


CHAT = {"model": "prb-sim-1", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sim_server_stops_within_5s_with_requests_in_flight(sig):
    port = free_port()
    took = _stops_with_requests_in_flight(
        [str(PRB), "sim-server", "--port", str(port), "--rate-slow", "1", "--slow-s", "60"],
        f"http://127.0.0.1:{port}/health",
        (f"http://127.0.0.1:{port}/v1/chat/completions", CHAT),
        sig,
        "the simulator",
    )
    assert took < 5


def test_reward_server_stops_within_5s_with_requests_in_flight(tmp_path, sim_factory):
    slow = sim_factory(rate_slow=1.0, slow_s=60)
    config = write_config(tmp_path, slow, model={"max_retries": 0, "timeout_s": 120})
    port = free_port()
    item = {"question": "q?", "profile": "p", "response": "r"}
    took = _stops_with_requests_in_flight(
        [str(PRB), "reward-server", "--rm", "judge", "--config", str(config), "--port", str(port)],
        f"http://127.0.0.1:{port}/health",
        (f"http://127.0.0.1:{port}/score", {"items": [item]}),
        signal.SIGTERM,
        "the reward server",
    )
    assert took < 5


@pytest.mark.parametrize("command", [["sim-server"], ["reward-server", "--rm", "length"]])
def test_a_port_in_use_is_one_line_and_exit_8_before_claiming_to_listen(command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = prb(*command, "--port", str(port), timeout=60)
    assert code == 8, err
    assert f"127.0.0.1:{port} is in use" in one_line(err)
    assert "http://" not in out  # never claimed to listen


# --- 6. no traceback, anywhere ---------------------------------------------------------------


def _commands():
    import typer

    from pipeline.cli import app

    def walk(cmd, path):
        if hasattr(cmd, "commands"):  # a group of subcommands
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    return list(walk(typer.main.get_command(app), []))


def test_every_command_answers_bad_and_wrong_typed_options_in_one_usage_error():
    """In-process (fast): every command and subcommand, with an unknown option and with each
    numeric option given nonsense: a usage error (exit 2), never a traceback."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    runner = CliRunner()
    commands = _commands()
    assert len(commands) >= 15
    tried = 0
    for path, cmd in commands:
        cases = [[*path, "--no-such-option"]]
        for p in cmd.params:
            if p.opts[0].startswith("--") and p.type_descriptor.annotation in (int, float):
                cases.append([*path, p.opts[0], "nonsense"])
        if path == ["sim-server"]:  # its own parser: options are not typer's
            cases.append([*path, "--port", "nonsense"])
        for args in cases:
            result = runner.invoke(app, args)
            tried += 1
            assert result.exit_code == 2, (args, result.output, result.exception)
            assert "Traceback" not in result.output, args
    assert tried >= 35


def _blocked_extras(tmp_path: Path) -> dict:
    """An environment where `import torch` / `transformers` fails, as without the hf extra."""
    site = tmp_path / "block"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "from importlib.machinery import PathFinder\n"
        "class Without(PathFinder):\n"
        "    @classmethod\n"
        "    def find_spec(cls, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'sentence_transformers'):\n"
        "            return None\n"
        "        return PathFinder.find_spec(name, path, target)\n"
        "sys.meta_path[:] = [Without if f is PathFinder else f for f in sys.meta_path]\n"
    )
    return {**prefect_env(), "PYTHONPATH": str(site)}


def test_missing_extras_network_failures_and_nonsense_are_one_line(tmp_path, sim_url):
    release = _write(tmp_path / "r.jsonl", controlled())
    blocked = _blocked_extras(tmp_path)
    cases = [
        (
            ("eval", str(release), "--rm", "hf:some/model", "--out", str(tmp_path / "e")),
            blocked,
            2,
            "pip install '.[hf]'",
        ),
        (("reward-server", "--rm", "hf:some/model"), blocked, 2, "pip install '.[hf]'"),
        (("audit", "hf:"), None, 2, "hf: needs a dataset name"),
        (("eval", "hf:"), None, 2, "hf: needs a dataset name"),
        (("compare", "hf:", str(release)), None, 2, "hf: needs a dataset name"),
    ]
    config = write_config(tmp_path, sim_url, personas={"per_category": 1})
    built = Path(build(config)["release_dir"])
    offline = {
        **prefect_env(),
        "HF_TOKEN": "hf_x",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HUB_OFFLINE": "0",
    }
    cases += [
        (
            ("release", "push", str(built), "--repo", "me/prb", "--allow-simulated"),
            offline,
            2,
            "the push to me/prb failed",
        ),
        (
            ("release", "push", str(built), "--repo", "not a/valid/repo", "--allow-simulated"),
            offline,
            2,
            "is not a Hub repo id",
        ),
    ]
    for args, env, code, said in cases:
        got, _, err = prb(*args, env=env, cwd=tmp_path, timeout=120)
        assert got == code, (args, err)
        assert said in one_line(err), (args, err)


def test_a_bug_is_one_line_naming_the_file_with_its_traceback(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import pipeline.release.publish as publish
    from pipeline.cli import app

    def broken(*_):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(publish, "verify", broken)
    monkeypatch.delenv("PRB_TRACEBACK", raising=False)
    result = CliRunner().invoke(app, ["release", "verify", str(tmp_path)])
    assert result.exit_code == 70
    assert "internal error (ZeroDivisionError: division by zero)" in result.output
    saved = result.output.split("traceback in ")[1].split()[0]
    assert "Traceback" in Path(saved).read_text() and "Traceback" not in result.output


# --- 7. endpoints that misbehave -------------------------------------------------------------


def test_an_absurd_retry_after_fails_the_calls_and_the_build_exits_7_saying_how_to_resume(
    tmp_path, sim_factory
):
    url = sim_factory(rate_429=0.7, retry_after="99999999", fault_tasks="rejected")
    config = write_config(tmp_path, url, personas={"per_category": 4})
    started = time.monotonic()
    code, _, err = prb("build", "--config", str(config), timeout=300)
    assert time.monotonic() - started < 120
    assert code == 7, err
    assert "asked to wait 99,999,999s" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "lost to endpoint errors" in last
    assert f"rerun `prb build --config {config} --run-id demo`" in last


def test_a_limit_too_small_to_finish_warns_and_the_eta_says_so():
    import asyncio

    from rich.console import Console

    from pipeline import progress
    from pipeline.llm.ratelimit import Limiter

    out = io.StringIO()
    with progress.showing(Console(file=out, width=300), interval=3600) as shown:
        stage = progress.stage("pairs", total=24)
        limiter = Limiter(tokens_per_minute=10, learn=False)
        asyncio.run(limiter.acquire(lambda: 500))
        eta = shown.rows()[0]["eta"]
    assert eta is not None and eta > 24 * 3000  # 24 calls of 500 tokens at 10 a minute
    assert "tokens_per_minute 10 is below one request (~500 tokens)" in out.getvalue()
    assert stage.done == 0


def test_an_eval_whose_pairs_mostly_fail_exits_7(tmp_path, sim_factory):
    url = sim_factory(rate_500=1.0)
    config = write_config(tmp_path, url, model={"max_retries": 0})
    release = _write(tmp_path / "r.jsonl", controlled())
    code, _, err = prb(
        "eval",
        str(release),
        "--rm",
        "judge",
        "--no-blind",
        "--config",
        str(config),
        "--out",
        str(tmp_path / "e"),
        "--bootstrap",
        "20",
        timeout=300,
    )
    assert code == 7, err
    assert "most pairs failed" in err and "rerun the same command" in err


def test_retry_after_beyond_the_cap_does_not_pause_every_request():
    from pipeline.llm.ratelimit import MAX_RETRY_AFTER_S, Limiter

    limiter = Limiter(requests_per_minute=600, learn=False)
    limiter.observe({"retry-after": "99999999"}, 429)
    assert limiter._paused_until < time.monotonic() + 1
    limiter.observe({"retry-after": str(MAX_RETRY_AFTER_S)}, 429)
    assert limiter._paused_until > time.monotonic() + MAX_RETRY_AFTER_S - 1


# --- 8. validation ---------------------------------------------------------------------------


def test_empty_persona_files_and_folders_are_errors(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.yaml").write_text("# nothing\n")
    (tmp_path / "none").mkdir()
    for target, said in (
        ("empty.jsonl", "the file is empty"),
        ("blank.yaml", "holds no records"),
        ("none", "no persona or question files"),
    ):
        code, out, err = prb("personas", "validate", str(tmp_path / target), timeout=60)
        assert code != 0, out
        assert said in out + err and not out.startswith("valid")


def test_invalid_utf8_is_reported_by_line_and_the_rest_is_still_checked(tmp_path):
    good = json.loads(
        (REPO / "personas" / "library").glob("*.jsonl").__next__().read_text().splitlines()[0]
    )
    lines = [json.dumps(good), b'{"name": "Ren\xe9e"}', "{broken", ""]
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines))
    code, out, _ = prb("personas", "validate", str(path), timeout=60)
    assert code == 1
    lines = out.splitlines()
    assert any(x.startswith(f"{path}:2:") and "not UTF-8 text" in x for x in lines), out
    assert any(x.startswith(f"{path}:3:") and "broken JSON" in x for x in lines), out
    yaml_path = tmp_path / "p.yaml"
    yaml_path.write_bytes(yaml.safe_dump([good]).encode() + b"# caf\xe9\n")
    code, out, _ = prb("personas", "validate", str(yaml_path), timeout=60)
    assert code == 1 and f"{yaml_path}:" in out and "not UTF-8 text" in out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
