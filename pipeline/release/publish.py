"""Checking, comparing and publishing a release folder: `prb release verify|diff|push`.

`verify` reads the folder the way a downloader would (pyarrow for the data, `datasets`' own
parser for the card's YAML) and lists every problem instead of stopping at the first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import pyarrow.parquet as pq
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard

from pipeline.errors import PrbError
from pipeline.records import pair_id
from pipeline.release.manifest import load
from pipeline.release.schema import FEATURES, PARQUET_GLOB, data_path, file_checksums, jsonl_path
from pipeline.text import jsonl_lines


class PushRefused(PrbError, RuntimeError):
    """Nothing was uploaded; the message says why."""


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def read_rows(release: Path) -> dict[str, list[dict]]:
    """Rows per category folder, read straight from the Parquet files; a PrbError (one line)
    when the folder is not a release or a data file cannot be read."""
    release = Path(release)
    if release.is_file():  # a JSONL/Parquet release: diff compares prb's folders
        raise PrbError(f"{release}: a file, not a release folder: give the release's folder")
    if not release.is_dir():
        raise PrbError(f"{release}: no such release folder")
    files = sorted(release.glob(PARQUET_GLOB))
    if not files:
        raise PrbError(f"{release}: not a release folder (no {PARQUET_GLOB} data files)")
    rows = {}
    for path in files:
        try:
            rows[path.parent.name] = pq.read_table(path).to_pylist()
        except Exception as e:  # Arrow raises several types for a damaged file
            raise PrbError(
                f"{path}: cannot read as Parquet ({type(e).__name__}); `prb release verify "
                f"{release}` checks the folder"
            ) from None
        missing = {"id", "category", "persona_id", "question"} - set(
            rows[path.parent.name][0] if rows[path.parent.name] else {}
        )
        if rows[path.parent.name] and missing:
            raise PrbError(f"{path}: not prb release rows (no column {sorted(missing)[0]!r})")
    return rows


def check_checksums(release: Path, manifest: dict) -> list[str]:
    listed, actual = manifest.get("files", {}), file_checksums(release)
    if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
        return ["manifest.json: `files` must map each file to its SHA-256"]
    problems = []
    for name in sorted(listed.keys() | actual.keys()):
        if name not in actual:
            problems.append(f"{name}: listed in manifest.json but missing")
        elif name not in listed:
            problems.append(f"{name}: present but not listed in manifest.json")
        elif listed[name] != actual[name]:
            problems.append(
                f"{name}: SHA-256 {actual[name][:12]}… does not match manifest {listed[name][:12]}…"
            )
    return problems


def check_data(release: Path) -> tuple[dict[str, list[dict]], list[str]]:
    """Schema, column order and JSONL copy of every data file; returns the readable rows."""
    rows, problems = {}, []
    for path in sorted(release.glob(PARQUET_GLOB)):
        name, category = path.relative_to(release).as_posix(), path.parent.name
        if name != data_path(category):
            problems.append(f"{name}: unexpected data file name (expected {data_path(category)})")
        try:
            table = pq.read_table(path)
        except Exception as e:  # any unreadable file is a finding, not a crash
            problems.append(f"{name}: cannot read as Parquet: {e}")
            continue
        if table.column_names != list(FEATURES):
            problems.append(f"{name}: columns {table.column_names} != expected {list(FEATURES)}")
        elif not table.schema.remove_metadata().equals(FEATURES.arrow_schema):
            problems.append(f"{name}: column types differ from the release schema")
        elif datasets.Features.from_arrow_schema(table.schema) != FEATURES:
            problems.append(f"{name}: embedded `datasets` features differ from the release schema")
        data = table.to_pylist()
        wrong = sorted({r.get("category") for r in data} - {category}, key=str)
        if wrong:
            problems.append(f"{name}: rows of category {wrong} in the {category} folder")
        rows[category] = data
        jsonl = release / jsonl_path(category)
        try:
            text = jsonl.read_text(encoding="utf-8")
            copy = [json.loads(line) for line in jsonl_lines(text)]
        except (OSError, ValueError) as e:
            problems.append(f"{jsonl_path(category)}: cannot read as JSON Lines: {e}")
            continue
        if copy != data:
            problems.append(f"{jsonl_path(category)}: rows differ from {name}")
    if not rows:
        problems.append(f"no data files matching {PARQUET_GLOB}")
    return rows, problems


def check_pairs(rows: dict[str, list[dict]]) -> list[str]:
    """No pair twice (by id or by persona + question), chosen ≠ rejected, ids match content."""
    problems: list[str] = []
    ids: dict[str, str] = {}
    asked: dict[tuple[str, str], str] = {}
    text = ("id", "persona_id", "question", "chosen", "rejected")
    for category, data in rows.items():
        for i, r in enumerate(data):
            where = f"{category} row {i} (id {r.get('id')!r})"
            wrong = [
                f"{c!r} is {'missing' if c not in r else type(r[c]).__name__}"
                for c in text
                if not isinstance(r.get(c), str)
            ]
            if wrong:  # the rest of the checks read these as text
                problems.append(f"{where}: {', '.join(wrong)}, not text")
                continue
            if r["id"] in ids:
                problems.append(f"{where}: duplicate pair id (also {ids[r['id']]})")
            ids.setdefault(r["id"], f"{category} row {i}")
            key = (r["persona_id"], _norm(r["question"]))
            if key in asked:
                problems.append(
                    f"{where}: persona {r['persona_id']} asks the same question as {asked[key]}"
                )
            asked.setdefault(key, where)
            if not r["chosen"].strip() or not r["rejected"].strip():
                problems.append(f"{where}: empty chosen or rejected answer")
            elif _norm(r["chosen"]) == _norm(r["rejected"]):
                problems.append(f"{where}: chosen and rejected are the same text")
            try:
                versions = {v["task"]: v["ref"] for v in r["prompt_versions"]}
            except (KeyError, TypeError):
                problems.append(f"{where}: no readable prompt_versions, so no id to check")
                continue
            if pair_id(r["persona_id"], r["question"], r.get("profile"), versions) != r["id"]:
                problems.append(
                    f"{where}: id does not match its persona, profile, question and prompts"
                )
    return problems


def check_card(release: Path, manifest: dict, counts: dict[str, int]) -> list[str]:
    """The card's YAML, parsed as `datasets` parses it, must name exactly the data there is."""
    path = release / "README.md"
    if not path.is_file():
        return ["README.md: missing dataset card"]
    try:
        data = DatasetCard.load(path).data
        configs = MetadataConfigs.from_dataset_card_data(data)
        infos = DatasetInfosDict.from_dataset_card_data(data)
    except Exception as e:
        return [f"README.md: cannot parse the YAML header: {e}"]
    problems = []
    expected = {"all": sorted(release.glob(PARQUET_GLOB))}
    expected |= {c: [release / data_path(c)] for c in counts}
    for name in sorted(configs.keys() - expected.keys()):
        problems.append(f"README.md: config {name!r} has no data in this release")
    for name in sorted(expected.keys() - configs.keys()):
        problems.append(f"README.md: no config for {name!r}")
    for name in sorted(configs.keys() & expected.keys()):
        files = configs[name].get("data_files")
        splits = files if isinstance(files, list) else []
        test = [s for s in splits if isinstance(s, dict) and s.get("split") == "test"]
        patterns = test[0]["path"] if test else []
        patterns = [patterns] if isinstance(patterns, str) else patterns
        found = sorted({p for pat in patterns for p in release.glob(pat)})
        if [s.get("split") for s in splits if isinstance(s, dict)] != ["test"]:
            problems.append(f"README.md: config {name!r} must have exactly one split, `test`")
        if found != expected[name]:
            names = [p.relative_to(release).as_posix() for p in found]
            problems.append(f"README.md: config {name!r} points to {names or 'no files'}")
        n = sum(counts.values()) if name == "all" else counts[name]
        info = infos.get(name)
        if info is None:
            problems.append(f"README.md: no dataset_info for config {name!r}")
            continue
        if info.features != FEATURES:
            problems.append(f"README.md: dataset_info features of {name!r} differ from the data")
        stated = info.splits["test"].num_examples if info.splits and "test" in info.splits else None
        if stated != n:
            problems.append(f"README.md: config {name!r} says {stated} rows, the data has {n}")
    defaults = [n for n, c in configs.items() if c.get("default")]
    if defaults != ["all"]:
        problems.append(f"README.md: default config is {defaults}, expected ['all']")
    if manifest.get("simulated") and "simulated" not in (data.to_dict().get("tags") or []):
        problems.append("README.md: a simulated build must carry the `simulated` tag")
    return problems


def check_manifest(manifest: dict, counts: dict[str, int]) -> list[str]:
    problems = []
    if manifest.get("per_category") != counts:
        problems.append(
            f"manifest.json: per_category {manifest.get('per_category')} != data {counts}"
        )
    funnel = manifest.get("funnel")
    steps = funnel if isinstance(funnel, list) else []
    released = {f.get("stage"): f.get("count") for f in steps if isinstance(f, dict)}.get(
        "released"
    )
    if released != sum(counts.values()):
        problems.append(
            f"manifest.json: funnel says {released} released, data has {sum(counts.values())}"
        )
    if "api_key" in json.dumps(manifest):
        problems.append("manifest.json: contains an api_key field")
    return problems


def verify(release: Path) -> list[str]:
    """Every problem found in a release folder; an empty list means it is sound."""
    release = Path(release)
    if not release.is_dir():
        raise PrbError(f"{release}: no such release folder")
    try:
        manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return [f"manifest.json: cannot read: {e}"]
    if not isinstance(manifest, dict):
        return [f"manifest.json: a JSON object expected, not a {type(manifest).__name__}"]
    problems = check_checksums(release, manifest)
    rows, found = check_data(release)
    problems += found
    counts = {c: len(r) for c, r in rows.items()}
    problems += check_pairs(rows)
    problems += check_card(release, manifest, counts)
    problems += check_manifest(manifest, counts)
    return problems


# --- diff -------------------------------------------------------------------------------------


@dataclass
class ReleaseDiff:
    added: list[dict] = field(default_factory=list)  # summaries: id, category, persona_id
    removed: list[dict] = field(default_factory=list)
    changed: list[dict] = field(default_factory=list)  # summary + "columns" that differ
    unchanged: int = 0

    def as_dict(self) -> dict:
        return {
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "unchanged": self.unchanged,
        }


def _summary(row: dict) -> dict:
    return {k: row[k] for k in ("id", "category", "persona_id", "question")}


def diff(old: Path, new: Path) -> ReleaseDiff:
    """Pairs added, removed and changed between two releases, matched by their content id."""
    before = {r["id"]: r for rows in read_rows(Path(old)).values() for r in rows}
    after = {r["id"]: r for rows in read_rows(Path(new)).values() for r in rows}
    out = ReleaseDiff()
    for pid in sorted(after.keys() - before.keys()):
        out.added.append(_summary(after[pid]))
    for pid in sorted(before.keys() - after.keys()):
        out.removed.append(_summary(before[pid]))
    for pid in sorted(before.keys() & after.keys()):
        columns = [c for c in FEATURES if before[pid].get(c) != after[pid].get(c)]
        if columns:
            out.changed.append({**_summary(after[pid]), "columns": columns})
        else:
            out.unchanged += 1
    return out


# --- push -------------------------------------------------------------------------------------


def push(
    release: Path,
    repo: str,
    private: bool = False,
    allow_simulated: bool = False,
    replace: bool = False,
    api=None,
) -> str:
    """Upload a verified release folder as a Hub dataset repo; returns the commit URL.

    Remote files are never deleted by default: if the repo holds files this release does not
    (another release, someone's notes), the push is refused and names them; `replace` makes the
    repo mirror the folder, deleting those. `api` is an `HfApi` (made from the token if None)."""
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise PushRefused(
            f"--repo {repo!r} is not a Hub repo id: use NAME or OWNER/NAME "
            "(letters, digits, '-', '_', '.'); nothing was uploaded"
        ) from None
    problems = verify(release)
    if problems:
        raise PushRefused(
            f"{release} fails verification ({len(problems)} problem(s); see `prb release verify`)"
        )
    manifest = load(release)
    if manifest.simulated and not allow_simulated:
        raise PushRefused(
            f"{release} was built on the simulator (its answers say so: served by "
            f"{', '.join(manifest.served_by) or 'the simulator'}); nothing was uploaded: pass "
            "--allow-simulated to publish a simulated benchmark anyway"
        )
    token = get_token()  # HF_TOKEN, or the token saved by `hf auth login`
    if not token:
        raise PushRefused(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login`; nothing was uploaded"
        )
    api = api or HfApi(token=token)
    try:
        return _upload(api, release, repo, manifest, private, replace)
    except PrbError:
        raise
    except Exception as e:  # noqa: BLE001  (the Hub client raises HTTP, network and OS errors)
        said = (str(e).strip().splitlines() or [""])[0][:200]
        raise PushRefused(
            f"the push to {repo} failed ({type(e).__name__}: {said}); check the "
            "network and HF_TOKEN, then push again (an upload is one commit: "
            "nothing half-written stays)"
        ) from None


def _upload(api, release: Path, repo: str, manifest, private: bool, replace: bool) -> str:
    api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
    local = {p.relative_to(release).as_posix() for p in Path(release).rglob("*") if p.is_file()}
    remote = set(api.list_repo_files(repo, repo_type="dataset"))
    foreign = sorted(remote - local - {".gitattributes"})  # the Hub's own file stays
    if foreign and not replace:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise PushRefused(
            f"{repo} holds {len(foreign)} file(s) this release does not ({shown}); nothing was "
            "uploaded: pass --replace to delete them, or push to another repo"
        )
    info = api.upload_folder(
        repo_id=repo,
        repo_type="dataset",
        folder_path=str(release),
        commit_message=f"prb release {manifest.run_id} ({manifest.config_fingerprint})",
        delete_patterns=foreign if replace and foreign else None,
    )
    return info.commit_url
