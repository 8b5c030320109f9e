"""RL against reward models: `prb reward-server` over real HTTP (good and bad input, the TRL and
verl adapters), and `prb eval rl` training two reward models' policies for a few GRPO steps on
CPU with a tiny policy the test builds, then the correlation table."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import build, prb, prefect_env, write_config

from pipeline.release.load import load_rows

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parent.parent
ITEM = {
    "question": "How do I start running on a budget?",
    "profile": [{"id": "p1", "text": "I am a student on a tight budget."}],
    "response": "Buy cheap shoes on a budget and run three times a week.",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server():
    """`prb reward-server --rm overlap` as a user starts it, on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "reward-server",
            "--rm",
            "overlap",
            "--port",
            str(port),
            "--max-items",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=prefect_env(),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the reward server did not start"
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_the_reward_server_scores_over_http_and_refuses_bad_input(server):
    health = httpx.get(f"{server}/health").json()
    assert health == {"status": "ok", "rm": "overlap/profile", "context": "profile"}
    off_topic = {**ITEM, "response": "Paint the fence blue."}
    r = httpx.post(f"{server}/score", json={"items": [ITEM, off_topic]})
    assert r.status_code == 200
    body = r.json()
    assert body["rm"] == "overlap/profile" and body["errors"] == {}
    assert body["scores"][0] > body["scores"][1] == 0.0  # shares "budget" with the profile
    profile_as_text = {**ITEM, "profile": "I am a student on a tight budget."}
    again = httpx.post(f"{server}/score", json={"items": [profile_as_text]}).json()
    assert again["scores"] == body["scores"][:1]
    bad = [
        ({"items": [{"question": "q?", "profile": ""}]}, 422, "items.0.response: Field required"),
        ({"items": []}, 422, "items: List should have at least 1 item"),
        ({"items": [{**ITEM, "mood": "happy"}]}, 422, "items.0.mood: Extra inputs"),
        ({"items": [ITEM] * 4}, 413, "4 items in one request (max 3)"),
        ({"texts": ["a"]}, 422, "items: Field required"),
    ]
    for body, status, words in bad:
        r = httpx.post(f"{server}/score", json=body)
        assert r.status_code == status, (body, r.text)
        assert words in (r.json().get("error") or r.json().get("detail")), r.text
    json_type = {"content-type": "application/json"}
    r = httpx.post(f"{server}/score", content=b"not json", headers=json_type)
    assert r.status_code == 422 and "JSON" in r.json()["error"]
    # the README's `curl -d '{...}'` sends a form type: the body is JSON all the same
    form = {"content-type": "application/x-www-form-urlencoded"}
    r = httpx.post(f"{server}/score", content=json.dumps({"items": [ITEM]}), headers=form)
    assert r.status_code == 200 and r.json()["scores"] == again["scores"], r.text


def test_the_trl_and_verl_adapters_call_the_server(server, monkeypatch):
    from pipeline.rl.adapters import RewardServerError, compute_score, trl_reward

    reward = trl_reward(server)
    got = reward(
        prompts=["p", "p"],
        completions=[ITEM["response"], [{"role": "assistant", "content": "Paint the fence."}]],
        question=[ITEM["question"]] * 2,
        profile=["I am a student on a tight budget."] * 2,
    )
    assert got[0] > 0 and got[1] == 0.0 and reward.__name__ == "prb_reward"
    monkeypatch.setenv("PRB_REWARD_URL", server)
    extra = {"question": ITEM["question"], "profile": "I am a student on a tight budget."}
    assert compute_score("prb", ITEM["response"], None, extra) == pytest.approx(got[0])
    with pytest.raises(RewardServerError, match=r"HTTP 413: 4 items"):
        trl_reward(server)(
            prompts=["p"] * 4, completions=["a"] * 4, question=["q"] * 4, profile=[""] * 4
        )


def test_the_reward_server_refuses_a_pairwise_judge_and_an_unknown_kind():
    for spec, words in (
        ("judge-pair", "a pairwise judge compares two answers"),
        ("nope", "unknown kind 'nope'"),
    ):
        done = prb("reward-server", "--rm", spec, "--port", str(free_port()), timeout=60)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_rl_trains_two_reward_models_and_writes_the_correlation_table(tmp_path, sim_url):
    from pipeline.rl.tiny import build_tiny_policy

    config = write_config(tmp_path / "b", sim_url, personas={"per_category": 2})
    release = Path(build(config)["release_dir"])
    rows, _ = load_rows(release)
    texts = [r[k] for r in rows for k in ("question", "chosen", "rejected")]
    policy = build_tiny_policy(
        tmp_path / "policy", texts + [p["text"] for r in rows for p in r["profile"]]
    )
    rl = {
        "steps": 2,
        "batch_size": 4,
        "num_generations": 2,
        "max_new_tokens": 12,
        "learning_rate": 0.001,
        "kl": 0.02,
        "held_out": 0.34,
    }
    run_config = write_config(tmp_path / "c", sim_url, rl=rl)
    out = tmp_path / "eval"
    done = prb(
        "eval",
        "rl",
        str(release),
        "--policy",
        str(policy),
        "--rm",
        "length",
        "--rm",
        "overlap",
        "--config",
        str(run_config),
        "--out",
        str(out),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "accuracy vs RL gain over 2 models" in done.stdout
    result = json.loads((out / "rl" / "rl.json").read_text())
    s = result["settings"]
    assert s["algorithm"] == "GRPO" and s["steps"] == 2 and s["kl"] == 0.02 and s["trl"]
    assert s["held_out_prompts"] == 2 and s["train_prompts"] == 4  # 6 users, by user
    models = {m["model"]: m for m in result["models"]}
    assert set(models) == {"length/profile", "overlap/profile"}
    for m in models.values():
        assert m["steps"] == 2 and m["seconds_per_step"] > 0
        assert m["rl_gain"] == pytest.approx(m["oracle_after"] - m["oracle_before"])
        assert len(m["answers"]) == 2 and 0 <= m["oracle_after"] <= 1
    # each policy was rewarded by its own model, through the server: lengths are word counts
    assert models["length/profile"]["reward_first"] > 1 > models["overlap/profile"]["reward_first"]
    assert set(result["correlation"]) >= {"spearman", "kendall", "ndcg", "models"}
    table = (out / "rl" / "rl.md").read_text()
    assert "| model | accuracy | rl_gain | oracle_before | oracle_after |" in table
    assert "Accuracy vs RL gain over 2 models" in table
    csv = (out / "rl" / "rl.csv").read_text().splitlines()
    assert csv[0].startswith("model,accuracy,rl_gain,oracle_before,oracle_after")
    assert len(csv) == 3
    assert (out / "rl" / "rl.png").read_bytes()[:4] == b"\x89PNG"


def test_rl_refuses_a_policy_that_is_not_a_model_folder(tmp_path):
    done = prb(
        "eval",
        "rl",
        str(tmp_path),
        "--policy",
        str(tmp_path / "nothing"),
        "--rm",
        "length",
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "not a Hugging Face model folder" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_chat_policy_is_asked_through_its_chat_template(tmp_path):
    from transformers import AutoTokenizer

    from pipeline.rl.tiny import build_tiny_policy
    from pipeline.rl.train import generate, policy_prompt

    rows = [{"id": "r1", "question": ITEM["question"], "profile": ITEM["profile"]}]
    policy = build_tiny_policy(tmp_path / "chat", [ITEM["question"], ITEM["response"]])
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    tokenizer.save_pretrained(policy)
    prompt = policy_prompt(rows[0], AutoTokenizer.from_pretrained(policy))
    assert [m["role"] for m in prompt] == ["system", "user"]  # conversational for TRL too
    answers = generate(policy, rows, max_new_tokens=5, device="cpu")
    assert set(answers) == {"r1"} and answers["r1"].strip()


def test_an_llm_judge_behind_the_server_asks_once_per_answer_and_waits_its_turn(tmp_path, sim_url):
    """The judge's calls go through llm.py and its response cache (the same answer is not paid
    for twice), and at most `concurrency` batches are scored at once."""
    import asyncio

    from pipeline.config import load_config
    from pipeline.records import ScoreRequest
    from pipeline.rl.server import Scorer, make_app

    cfg = load_config(write_config(tmp_path, sim_url))
    scorer = Scorer("judge", cfg)
    request = ScoreRequest(items=[ITEM])

    async def twice():
        first = await scorer.score(request.items)
        again = await scorer.score(request.items)
        usage = scorer.llm.usage_dict()[f"reward-server {scorer.name}"]
        await scorer.aclose()
        return first, again, usage

    first, again, usage = asyncio.run(twice())
    assert first.scores == again.scores and 1 <= first.scores[0] <= 10
    assert usage["calls"] == 1 and usage["cache_hits"] == 1

    busy, peak = 0, 0

    class Slow:  # a stand-in scorer that records how many batches it holds at once
        name, rm = "slow", type("rm", (), {"context": "profile"})()

        async def score(self, items):
            nonlocal busy, peak
            busy += 1
            peak = max(peak, busy)
            await asyncio.sleep(0.2)
            busy -= 1
            return {"rm": "slow", "scores": [1.0] * len(items), "errors": {}}

        async def aclose(self):
            pass

    from fastapi.testclient import TestClient

    with TestClient(make_app(Slow, concurrency=2)) as client:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(6) as pool:
            codes = list(
                pool.map(
                    lambda _: client.post("/score", json={"items": [ITEM]}).status_code, range(6)
                )
            )
    assert codes == [200] * 6 and peak == 2
