"""The released split: schema, loading, determinism, `prb release verify|diff|push`.

Four small builds (2 personas per category unless said) over the shared simulator:
`two` and `three` (3 per category) share one response cache; `fresh` repeats `two` with a new,
empty cache in another folder; `renamed` repeats `two` under another run id.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import build, write_config
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.records import pair_id
from pipeline.release.publish import diff, verify
from pipeline.release.schema import FEATURES, file_checksums
from pipeline.stages.release import write_jsonl

PUBLIC = [
    "id",
    "question",
    "profile",
    "rubric_aspects",
    "narrative",
    "category",
    "chosen",
    "rejected",
]
PROVENANCE = [
    "persona_id",
    "question_id",
    "rejected_strategy",
    "rejected_for",
    "rejected_for_profile",
    "differences",
    "quality",
    "pair_checks",
    "would_drop",
    "annotation",
    "generator_model",
    "judge_model",
    "prompt_versions",
]
CATEGORIES = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sim_url) -> dict:
    tmp = tmp_path_factory.mktemp("release")
    shared = str(tmp / "outputs")
    calls: dict[str, int] = {}

    def release(name: str, run_id: str, outputs: str, per_category: int = 2) -> Path:
        config = write_config(
            tmp / name,
            sim_url,
            run_id=run_id,
            outputs_dir=outputs,
            personas={"per_category": per_category},
        )
        result = build(config)
        calls[name] = sum(u["calls"] for u in result["usage"].values())
        return Path(result["release_dir"])

    return {
        "two": release("two", "two", shared),
        "three": release("three", "three", shared, per_category=3),
        "fresh": release("fresh", "two", str(tmp / "fresh-outputs")),
        "renamed": release("renamed", "renamed", shared),
        "tmp": tmp,
        "calls": calls,
    }


def copy_release(runs, tmp_path) -> Path:
    return Path(shutil.copytree(runs["two"], tmp_path / "release"))


def rewrite(release: Path, category: str, change) -> None:
    """Change one category's rows and re-record the checksums, so that only the semantic check
    under test can notice."""
    path = release / category / "test-00000-of-00001.parquet"
    rows = change(pq.read_table(path).to_pylist())
    ds = datasets.Dataset.from_list(rows, features=FEATURES)
    ds.to_parquet(str(path))
    write_jsonl(path, release / category / "test.jsonl")
    rehash(release)


def rehash(release: Path) -> None:
    manifest = json.loads((release / "manifest.json").read_text())
    manifest["files"] = file_checksums(release)
    (release / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def edit_card(release: Path, change) -> None:
    text = (release / "README.md").read_text()
    _, header, body = text.split("---\n", 2)
    meta = yaml.safe_load(header)
    change(meta)
    (release / "README.md").write_text(f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n{body}")
    rehash(release)


# --- schema and loading -----------------------------------------------------------------------


def test_schema_and_column_order(runs):
    release = runs["two"]
    files = sorted(release.glob("*/test-*.parquet"))
    assert [f.parent.name for f in files] == CATEGORIES
    for f in files:
        schema = pq.read_schema(f)
        assert schema.names == PUBLIC + PROVENANCE
        assert datasets.Features.from_arrow_schema(schema) == FEATURES
        assert schema.remove_metadata().equals(FEATURES.arrow_schema)


def test_every_config_loads_with_datasets(runs):
    release = runs["two"]
    manifest = json.loads((release / "manifest.json").read_text())
    for category in CATEGORIES:
        ds = datasets.load_dataset(str(release), category, split="test")
        assert ds.features == FEATURES
        assert ds.num_rows == manifest["per_category"][category] > 0
        assert set(ds["category"]) == {category}
        for row in ds:
            versions = {v["task"]: v["ref"] for v in row["prompt_versions"]}
            assert set(versions) == {"content_plan", "chosen", "rejected"}
            assert row["id"] == pair_id(
                row["persona_id"], row["question"], row["profile"], versions
            )
            assert row["generator_model"] == row["judge_model"] == "prb-sim-1"
            assert row["annotation"]["verdict"] == "unlabelled"
            assert row["rejected_strategy"] and row["chosen"] != row["rejected"]
    whole = datasets.load_dataset(str(release), split="test")  # the default config, `all`
    assert whole.num_rows == sum(manifest["per_category"].values())


def test_a_swapped_pair_carries_the_profile_of_the_user_its_rejected_was_written_for(
    tmp_path, sim_url
):
    """Issue 46: the swap probe asks the rejected answer under the profile of the user it was
    written for; a release that named that user but carried no profile for one without a pair
    of their own left the probe half its pairs."""
    config = write_config(
        tmp_path,
        sim_url,
        personas={"per_category": 3},
        generation={"strategies": ["persona_swap", "wrong_tone"]},
    )
    release = Path(build(config)["release_dir"])
    personas = release.parent / "personas.jsonl"
    profiles = {
        p["persona_id"]: p["profile"] for p in map(json.loads, personas.read_text().splitlines())
    }
    rows = datasets.load_dataset(str(release), split="test").to_list()
    swapped = [r for r in rows if r["rejected_for"]]
    assert swapped and len(swapped) < len(rows)  # both kinds, or the test proves nothing
    for r in rows:
        want = profiles[r["rejected_for"]] if r["rejected_for"] else []
        assert r["rejected_for_profile"] == want


def test_jsonl_copy_matches_the_parquet_and_is_checksummed(runs):
    release = runs["two"]
    manifest = json.loads((release / "manifest.json").read_text())
    for category in CATEGORIES:
        name = f"{category}/test.jsonl"
        assert name in manifest["files"]
        lines = (release / name).read_text().splitlines()
        rows = pq.read_table(release / category / "test-00000-of-00001.parquet").to_pylist()
        assert [json.loads(line) for line in lines] == rows
        assert list(json.loads(lines[0])) == PUBLIC + PROVENANCE


def test_card_and_manifest_say_how_it_was_made(runs):
    release = runs["two"]
    card = (release / "README.md").read_text()
    manifest = json.loads((release / "manifest.json").read_text())
    for heading in (
        "What it measures",
        "How the pairs were built",
        "Models and prompts",
        "Filter thresholds",
        "Annotation",
        "Known limitations",
        "Licence",
    ):
        assert f"## {heading}" in card
    assert "Simulated build" in card and manifest["simulated"] is True
    for column in FEATURES:
        assert f"| `{column}` |" in card
    for step in manifest["funnel"]:
        assert f"| `{step['stage']}` | {step['count']} |" in card
    for prompt in manifest["prompts"].values():
        assert prompt["sha256"][:12] in card
    assert manifest["run_id"] == "two"
    # every prompt a build can call, the opt-in counterfactual check's included
    used = {
        "planner",
        "content_plan",
        "chosen",
        "rejected",
        "judge_quality",
        "judge_adherence",
        "judge_blind",
        "rm_pairwise",
    }
    assert set(manifest["prompts"]) == used


def test_no_secret_path_or_endpoint_in_the_release(runs):
    text = "".join(p.read_text() for p in runs["two"].rglob("*.*") if p.suffix != ".parquet")
    assert "sk-local-simulator" not in text  # the default API key
    assert "api_key" not in text
    assert str(runs["tmp"]) not in text  # where it was built
    assert "127.0.0.1" not in text  # the simulator's (random) port


# --- determinism -------------------------------------------------------------------------------


def test_same_inputs_give_identical_bytes_even_without_the_cache(runs):
    # `fresh` asked the simulator again from an empty cache, in another output folder
    assert runs["calls"]["fresh"] == runs["calls"]["two"] > 0
    assert runs["calls"]["renamed"] == 0
    assert file_checksums(runs["fresh"]) == file_checksums(runs["two"])
    assert (runs["fresh"] / "manifest.json").read_bytes() == (
        runs["two"] / "manifest.json"
    ).read_bytes()


def test_another_run_id_changes_only_the_manifest_run_id(runs):
    assert file_checksums(runs["renamed"]) == file_checksums(runs["two"])
    a = json.loads((runs["two"] / "manifest.json").read_text())
    b = json.loads((runs["renamed"] / "manifest.json").read_text())
    assert (a.pop("run_id"), b.pop("run_id")) == ("two", "renamed")
    assert a == b


# --- verify ------------------------------------------------------------------------------------


def test_verify_passes_a_built_release(runs):
    for name in ("two", "three"):
        assert verify(runs[name]) == []
    result = CliRunner().invoke(app, ["release", "verify", str(runs["two"])])
    assert result.exit_code == 0, result.output
    assert "OK" in result.output


def test_verify_catches_a_corrupted_file(runs, tmp_path):
    release = copy_release(runs, tmp_path)
    path = release / "Society_and_Culture" / "test-00000-of-00001.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    (release / "Art_and_Entertainment" / "test.jsonl").write_text("")
    problems = verify(release)
    assert any(
        p.startswith("Society_and_Culture/test-00000-of-00001.parquet: SHA-256") for p in problems
    ), problems
    assert any(p.startswith("Art_and_Entertainment/test.jsonl: SHA-256") for p in problems)
    assert "Art_and_Entertainment/test.jsonl: rows differ from" in "\n".join(problems)
    result = CliRunner().invoke(app, ["release", "verify", str(release)])
    assert result.exit_code == 1
    assert "Society_and_Culture/test-00000-of-00001.parquet: SHA-256" in result.output


def test_verify_catches_a_duplicated_pair(runs, tmp_path):
    release = copy_release(runs, tmp_path)
    rewrite(release, "Lifestyle_and_Personal_Development", lambda rows: rows + rows[:1])
    problems = "\n".join(verify(release))
    assert "duplicate pair id" in problems
    assert "asks the same question" in problems
    assert "per_category" in problems  # the manifest's counts no longer match the data


def test_verify_catches_identical_answers_and_a_moved_row(runs, tmp_path):
    release = copy_release(runs, tmp_path)

    def same_answers(rows):
        rows[0]["rejected"] = " " + rows[0]["chosen"].upper()
        return rows

    rewrite(release, "Art_and_Entertainment", same_answers)
    moved = pq.read_table(release / "Society_and_Culture" / "test-00000-of-00001.parquet")
    rewrite(release, "Art_and_Entertainment", lambda rows: rows + moved.to_pylist()[:1])
    problems = "\n".join(verify(release))
    assert "chosen and rejected are the same text" in problems
    assert "duplicate pair id" in problems  # the row is in two configs now
    assert "rows of category ['Society_and_Culture'] in the Art_and_Entertainment" in problems


def test_verify_catches_a_card_that_disagrees_with_the_data(runs, tmp_path):
    release = copy_release(runs, tmp_path)

    def disagree(meta):
        meta["dataset_info"][1]["splits"][0]["num_examples"] += 1  # first category config
        meta["configs"] = [c for c in meta["configs"] if c["config_name"] != CATEGORIES[2]]
        meta["configs"][1]["data_files"][0]["path"] = "Art_and_Entertainment/missing.parquet"
        meta["tags"].remove("simulated")

    edit_card(release, disagree)
    problems = verify(release)
    text = "\n".join(problems)
    assert f"config '{CATEGORIES[0]}' says" in text
    assert f"no config for '{CATEGORIES[2]}'" in text
    assert f"config '{CATEGORIES[0]}' points to no files" in text
    assert "`simulated` tag" in text
    assert not any("SHA-256" in p for p in problems)  # the checksums were re-recorded


def test_verify_reports_a_missing_card(runs, tmp_path):
    release = copy_release(runs, tmp_path)
    (release / "README.md").unlink()
    problems = verify(release)
    assert "README.md: listed in manifest.json but missing" in problems
    assert "README.md: missing dataset card" in problems


# --- diff and push -----------------------------------------------------------------------------


def test_diff_reports_the_added_personas_pairs(runs):
    old, new = runs["two"], runs["three"]
    d = diff(old, new)
    old_personas = {r["persona_id"] for r in datasets.load_dataset(str(old), split="test")}
    new_rows = list(datasets.load_dataset(str(new), split="test"))
    expected = sorted(r["id"] for r in new_rows if r["persona_id"] not in old_personas)
    assert expected  # three personas per category instead of two
    assert [a["id"] for a in d.added] == expected
    assert {a["persona_id"] for a in d.added}.isdisjoint(old_personas)
    assert d.removed == [] and d.changed == []
    assert d.unchanged == len(new_rows) - len(expected)
    back = diff(new, old)
    assert [r["id"] for r in back.removed] == expected and back.added == []
    result = CliRunner().invoke(app, ["release", "diff", str(old), str(new), "--json"])
    assert result.exit_code == 0, result.output
    assert [a["id"] for a in json.loads(result.output)["added"]] == expected


def test_diff_reports_a_changed_pair(runs, tmp_path):
    release = copy_release(runs, tmp_path)

    def change(rows):
        rows[0]["chosen"] += " Thanks."
        return rows

    rewrite(release, "Society_and_Culture", change)
    d = diff(runs["two"], release)
    assert len(d.changed) == 1 and d.changed[0]["columns"] == ["chosen"]
    assert d.added == d.removed == []


def test_push_refuses_without_a_token(runs, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env |= {"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "release",
            "push",
            str(runs["two"]),
            "--repo",
            "someone/prb-test",
            "--allow-simulated",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")  # one line
    assert "no Hugging Face token" in proc.stderr and "HF_TOKEN" in proc.stderr


def test_the_cards_probes_read_a_seeded_sample_of_a_large_release(
    runs, sim_url, tmp_path, monkeypatch
):
    """Issue 39: the release stage's probes keep at most PROBE_SAMPLE rows (the smallest
    sha256 of seed and id, whatever order they arrive in), and card and manifest say so."""
    from pipeline.stages import release as stage

    rows = [{k: f"{k}-{i}" for k in stage.PROBED} for i in range(200)]
    extra = {"rejected_strategy": "x", "pair_checks": {"blind_picked": "none"}}
    extra["annotation"] = {"verdict": "agree"}

    def kept(order):
        stats = stage.ReleaseStats(sample=20, seed=7)
        for r in order:
            stats.add({**r, **extra})
        return stats

    forward, backward = kept(rows), kept(rows[::-1])
    assert forward.n == 200 and len(forward.probed) == 20
    assert {r["id"] for r in forward.probed} == {r["id"] for r in backward.probed}
    ids = [r["id"] for r in forward.probed]
    assert ids == [r["id"] for r in rows if r["id"] in set(ids)]  # in the order they came
    assert forward.sampled() == {"pairs": 20, "of": 200, "seed": 7, "by": "sha256(seed:id)"}
    assert kept(rows[:20]).sampled() is None  # a release within the sample is read whole

    monkeypatch.setattr(stage, "PROBE_SAMPLE", 3)
    config = write_config(
        tmp_path, sim_url, run_id="sampled", outputs_dir=str(runs["tmp"] / "outputs")
    )
    release = Path(build(config)["release_dir"])
    manifest = json.loads((release / "manifest.json").read_text())
    n = sum(manifest["per_category"].values())
    assert n > 3 and manifest["validity"]["sample"]["pairs"] == 3
    assert manifest["validity"]["sample"]["of"] == n
    assert all(p["n"] <= 3 for f in manifest["validity"]["families"] for p in f["probes"])
    assert f"a seeded sample of 3 of the {n} released pairs" in (release / "README.md").read_text()
    unsampled = json.loads((runs["two"] / "manifest.json").read_text())["validity"]
    assert "sample" not in unsampled


def test_verify_reads_a_jsonl_copy_whose_text_holds_unicode_line_breaks(runs, tmp_path):
    """An imported post holding U+2028 or U+0085 (raw in JSON Lines, as JSON allows) split
    the copy into broken lines: "cannot read as JSON Lines" on a sound release (issue 48)."""
    release = copy_release(runs, tmp_path)

    def breaks(rows):
        rows[0]["narrative"] = "first\u2028second\x85third\u2029"
        return rows

    rewrite(release, "Society_and_Culture", breaks)
    assert "\u2028" in (release / "Society_and_Culture" / "test.jsonl").read_text()
    assert verify(release) == []
