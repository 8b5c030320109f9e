"""Read any release in the public schema, for `prb audit` and `prb eval`.

Accepted, in the order tried:
- `hf:NAME` — a dataset on the Hugging Face Hub (network needed), read with `datasets`;
- a folder with a dataset card whose `configs:` list its data files: the official hub layout
  (one folder of Parquet per category config, several configs and no default) and prb's own
  releases (an `all` default config). With a default config that one is read; without one,
  every config, each row tagged with its config when it has no `category`. Read file by
  file with Arrow: a file with no rows, or a column only some files have, is a warning, not
  a release `datasets` refuses whole;
- a folder of `*/test-*.parquet` without a card (a prb release whose card was removed);
- one JSONL, JSON (a list of rows) or Parquet file.

Every row must have the public columns (`id, question, profile, rubric_aspects, narrative,
category, chosen, rejected`); a missing column or an empty question is refused with one line
naming the file and the row. Rows that cannot be measured (repeated, empty or identical answers,
or a text of a size no answer has) are left out with a warning in `info["warnings"]`, which
audit, eval and compare show. `profile` may be a list of `{id?, text}` posts or one string.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.errors import PrbError
from pipeline.release.schema import PARQUET_GLOB, PUBLIC

# a text longer than this is no answer a benchmark asks for, and measuring it costs memory out
# of all proportion (a 10 MB answer: 1.7 GB in the char n-gram probe): such pairs are left out
MAX_TEXT_CHARS = 100_000  # a question or an answer
MAX_PROFILE_CHARS = 2_000_000


class ReleaseError(PrbError, ValueError):
    """A release that cannot be read; the message names the file or the row."""


def load_rows(spec: str | Path) -> tuple[list[dict], dict]:
    """(rows, info): the rows of a release in any accepted layout that can be measured, and
    where they came from (`source`, `layout`, `configs`) with `warnings` about the files and
    rows that could not (see `_card_files`, `_checked`)."""
    rows, info = _load(spec)
    checked, warnings = _checked(rows, info["source"])
    warnings = [*info.pop("warnings", []), *warnings]
    return checked, {**info, "rows": len(rows), "warnings": warnings}


def _load(spec: str | Path) -> tuple[list[dict], dict]:
    text = str(spec)
    if text.startswith("hf:"):
        name = text[3:].strip()
        if not name:
            raise ReleaseError("hf: needs a dataset name after it, e.g. hf:user/name")
        rows, configs = _from_datasets(name, f"hf:{name}")
        return rows, {"source": text, "layout": "hub", "configs": configs}
    path = Path(spec)
    if not text.strip():
        raise ReleaseError(
            "no release given: name a release folder, a JSONL/JSON/Parquet file or hf:NAME"
        )
    if path.is_dir():
        if (path / "README.md").exists() and (listed := _card_configs(path)):
            rows, configs, warnings = _card_files(path, listed)
            info = {"source": str(path), "layout": "card configs", "configs": configs}
            return rows, {**info, "warnings": warnings}
        files = sorted(path.glob(PARQUET_GLOB))
        if not files:
            raise ReleaseError(
                f"{path}: no dataset card with configs and no {PARQUET_GLOB} "
                "files: not a release folder"
            )
        rows = [r for f in files for r in _read_file(f)]
        configs = sorted({f.parent.name for f in files})
        return rows, {"source": str(path), "layout": "parquet folders", "configs": configs}
    if path.is_file():
        return _read_file(path), {"source": str(path), "layout": "file", "configs": []}
    raise ReleaseError(
        f"{spec}: no such file or folder (a release folder, a JSONL/JSON/Parquet file, or hf:NAME)"
    )


def _card_configs(folder: Path) -> list[dict]:
    import yaml

    text = (folder / "README.md").read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return []
    try:
        meta = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError as e:
        raise ReleaseError(
            f"{folder / 'README.md'}: the card's YAML header is invalid: {e}"
        ) from None
    configs = meta.get("configs") if isinstance(meta, dict) else None
    return configs if isinstance(configs, list) else []


def _card_files(folder: Path, listed: list) -> tuple[list[dict], list[str], list[str]]:
    """A local folder's configs as its card lists them (the default config if one is marked,
    else every config; each config's `test` split, else its first), read file by file: a
    file with no rows is skipped and a column that only some files have is read where it is,
    each with a warning, where `datasets` would refuse the whole release for either."""
    configs = [c for c in listed if isinstance(c, dict) and c.get("config_name")]
    chosen = [c for c in configs if c.get("default")] or configs
    rows: list[dict] = []
    warnings: list[str] = []
    columns: dict[str, set[str]] = {}  # file -> its columns
    for config in chosen:
        name = str(config["config_name"])
        files = _split_files(folder, config.get("data_files"))
        if not files:
            raise ReleaseError(f"{folder / 'README.md'}: config {name!r} lists no data file here")
        found = []
        for f in files:
            part = _read_file(f)
            if not part:
                warnings.append(f"{f.relative_to(folder)} has no rows (skipped)")
            else:
                columns[str(f.relative_to(folder))] = set(part[0])
            found += part
        for row in found:
            if not row.get("category"):
                row["category"] = name
        rows += found
    everywhere = set.intersection(*columns.values()) if columns else set()
    for column in sorted(set().union(*columns.values()) - everywhere):
        where = [f for f, cols in columns.items() if column in cols]
        shown = f"{len(where)} of {len(columns)} files: {_first(where)}"
        warnings.append(f"column {column!r} is only in {shown}")
    return rows, [str(c["config_name"]) for c in chosen], warnings


def _split_files(folder: Path, data_files) -> list[Path]:
    """The files of a config's `test` split (else its first) under `folder`, in order. The
    card's `data_files` is a pattern, a list of patterns, or a list of {split, path}."""
    if isinstance(data_files, str):
        patterns = [data_files]
    elif isinstance(data_files, list) and all(isinstance(x, str) for x in data_files):
        patterns = data_files
    elif isinstance(data_files, list):
        splits = [d for d in data_files if isinstance(d, dict) and d.get("path")]
        pick = next((d for d in splits if d.get("split") == "test"), splits[0] if splits else {})
        path = pick.get("path", [])
        patterns = [path] if isinstance(path, str) else [str(x) for x in path]
    else:
        patterns = []
    root = folder.resolve()
    found: list[Path] = []
    for pattern in patterns:
        for f in sorted(folder.glob(pattern)):
            if f.is_file() and f.resolve().is_relative_to(root) and f not in found:
                found.append(f)  # a pattern that climbs out of the folder reads nothing
    return found


def _from_datasets(source: str, label: str) -> tuple[list[dict], list[str]]:
    """Every config of a hub-style dataset (or its default one), through `datasets`."""
    import datasets

    datasets.disable_progress_bars()
    try:
        names = datasets.get_dataset_config_names(source)
        default = datasets.get_dataset_default_config_name(source)
    except Exception as e:  # noqa: BLE001  (datasets raises many kinds for a bad source)
        raise ReleaseError(f"{label}: cannot read its configs: {e}") from None
    chosen = [default] if default else names
    rows: list[dict] = []
    # a fresh cache each time: datasets keys a local folder's cache by its name and layout, not
    # its content, and served another release's rows for a rebuilt one
    with tempfile.TemporaryDirectory(prefix="prb-release-") as cache:
        for name in chosen:
            try:
                parts = datasets.load_dataset(source, name, cache_dir=cache)
            except Exception as e:  # noqa: BLE001
                raise ReleaseError(f"{label}: cannot load config {name!r}: {e}") from None
            split = "test" if "test" in parts else next(iter(parts))
            for row in parts[split].to_list():
                if not row.get("category") and name:
                    row["category"] = name
                rows.append(row)
    return rows, list(chosen)


def _read_file(path: Path) -> list[dict]:
    try:
        if path.suffix == ".parquet":  # Arrow's rows: a null is None (pandas makes it NaN)
            return pq.read_table(path).to_pylist()
        if path.suffix == ".jsonl":
            # lines are split on "\n" only: U+2028 and friends may sit inside a JSON string
            lines = path.read_text(encoding="utf-8").split("\n")
            return [json.loads(x) for x in lines if x.strip()]
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                raise ValueError("a JSON release file must hold a list of rows")
            return data
    except (ValueError, OSError) as e:
        raise ReleaseError(f"{path}: cannot read it as {path.suffix[1:]}: {e}") from None
    except Exception as e:  # noqa: BLE001  (Arrow raises many types for unreadable files)
        raise ReleaseError(f"{path}: cannot read it: {e}") from None
    raise ReleaseError(f"{path}: not a .jsonl, .json or .parquet file")


def _plain(value):
    """Arrow/NumPy values as plain Python (lists of dicts, not arrays)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _checked(rows: list[dict], where) -> tuple[list[dict], list[str]]:
    """The rows that can be measured, and a warning for each kind of row that cannot: a row
    repeated whole (counted once), an id given to two different pairs (the later one renamed
    `ID#2`), an empty answer and chosen identical to rejected (both left out: no probe or
    reward model can separate them, and counting them would pull every figure to a tie)."""
    if not rows:
        raise ReleaseError(f"{where}: no rows")
    out, seen = [], {}
    repeated, renamed, empty, identical, huge = [], [], [], [], []
    mistyped: dict[str, list[str]] = {}  # "'chosen' is int" -> ids
    for i, raw in enumerate(rows):
        if not isinstance(raw, dict):
            raise ReleaseError(f"{where}: row {i} is not an object")
        missing = [c for c in PUBLIC if c not in raw]
        if missing:
            raise ReleaseError(
                f"{where}: row {raw.get('id', i)!r} lacks the public column(s) "
                f"{missing}: is this a release in the public schema?"
            )
        row = {k: _plain(v) for k, v in raw.items()}
        if not isinstance(row["question"], str) or not row["question"].strip():
            raise ReleaseError(f"{where}: row {row['id']!r} has an empty or non-text question")
        if not isinstance(row["category"], str) or not row["category"].strip():  # a config name
            cat = row["category"]
            what = "null" if cat is None else "empty" if cat == "" else type(cat).__name__
            mistyped.setdefault(f"'category' is {what}", []).append(str(row["id"]))
            continue
        key = (str(row["category"]), str(row["id"]))
        if key in seen:
            if seen[key] == row:
                repeated.append(key[1])
                continue
            n = 2
            while (key[0], f"{key[1]}#{n}") in seen:
                n += 1
            renamed.append(key[1])
            row["id"] = f"{key[1]}#{n}"
            key = (key[0], row["id"])
        seen[key] = row
        answers = [row[k] for k in ("chosen", "rejected")]
        typed = [
            (k, type(v).__name__) for k, v in zip(("chosen", "rejected"), answers, strict=True)
        ]
        if wrong := [f"{k!r} is {t}" for k, t in typed if t not in ("str", "NoneType")]:
            mistyped.setdefault(", ".join(wrong), []).append(str(row["id"]))
        elif not all(isinstance(a, str) and a.strip() for a in answers):
            empty.append(str(row["id"]))
        elif answers[0].strip() == answers[1].strip():
            identical.append(str(row["id"]))
        elif (
            any(len(row[k]) > MAX_TEXT_CHARS for k in ("question", "chosen", "rejected"))
            or len(profile_text(row)) > MAX_PROFILE_CHARS
        ):
            huge.append(str(row["id"]))
        else:
            out.append(row)
    warnings = [
        f"{len(ids)} {what}: {_first(ids)}"
        for ids, what in (
            *((ids, f"pairs whose {how}, not text (left out)") for how, ids in mistyped.items()),
            (repeated, "rows repeat an earlier row whole (same id and content; counted once)"),
            (renamed, "ids name two different pairs (the later renamed ID#2)"),
            (empty, "pairs have an empty or non-text answer (left out)"),
            (identical, "pairs have chosen identical to rejected (left out)"),
            (
                huge,
                f"pairs have a question or an answer over {MAX_TEXT_CHARS:,} "
                f"characters or a profile over {MAX_PROFILE_CHARS:,} (left out)",
            ),
        )
        if ids
    ]
    if not out:
        raise ReleaseError(
            f"{where}: none of its {len(rows)} rows is a pair that can be "
            f"measured: {'; '.join(warnings)}"
        )
    return out, warnings


def _first(ids: list[str], shown: int = 3) -> str:
    """The first few ids, each once, with how often it came when more than once."""
    counts = Counter(ids)
    named = [f"{i!r} (x{n})" if n > 1 else repr(i) for i, n in counts.items()]
    more = len(named) - shown
    return ", ".join(named[:shown]) + (f" and {more} more" if more > 0 else "")


def profile_text(row: dict) -> str:
    """The user's profile as one text: posts joined, whatever shape the release gives them."""
    p = row.get("profile")
    if isinstance(p, str):
        return p
    if isinstance(p, list):
        return "\n".join(x.get("text", "") if isinstance(x, dict) else str(x) for x in p)
    return ""


CONTEXT_MODES = ("profile", "aspects", "narrative", "none")


def user_context(row: dict, mode: str) -> str:
    """The user context a reward model or a judge sees, rendered from one release row."""
    if mode == "profile":  # a list of posts (with or without ids), or one text
        posts = row["profile"]
        if isinstance(posts, str):
            return posts
        return "\n".join(
            (f"[{p['id']}] {p.get('text', '')}" if p.get("id") else p.get("text", ""))
            if isinstance(p, dict)
            else str(p)
            for p in posts
        )
    if mode == "aspects":
        aspects = row["rubric_aspects"]
        if isinstance(aspects, str):
            return aspects
        return "\n".join(
            f"{i}. {a['aspect'] if isinstance(a, dict) else a}" for i, a in enumerate(aspects, 1)
        )
    if mode == "narrative":
        return row["narrative"] or ""
    if mode == "none":
        return ""
    raise PrbError(f"unknown context mode {mode!r}; use one of {', '.join(CONTEXT_MODES)}")


def user_key(row: dict) -> str:
    """Who the row's user is: `persona_id` where the release has one, else the profile text
    (the public schema has no user id; the same profile is the same user)."""
    import hashlib

    if row.get("persona_id"):
        return str(row["persona_id"])
    return hashlib.sha256(profile_text(row).encode()).hexdigest()[:16]
