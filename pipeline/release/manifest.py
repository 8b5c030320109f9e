"""`manifest.json`: what a release was made from and what it holds, as one pydantic model.

Written with sorted keys, so the same inputs give the same bytes; read back with `load` by
everything that wants a release's facts (card, verify, audit, eval, cost). The funnel is
computed once, by the build, from what its stages counted (`funnel`), and written beside the
stage files too (`funnel.json`, with why records were lost), so the audit never recounts it.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pipeline.errors import PrbError

FORMAT_VERSION = 1
PACKAGES = (
    "prb",
    "openai",
    "datasets",
    "huggingface_hub",
    "pyarrow",
    "pandas",
    "prefect",
    "pydantic",
    "tenacity",
)
FUNNEL_FILE = "funnel.json"


class FunnelStep(BaseModel):
    stage: str
    count: int


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")  # a newer prb's fields are kept, not refused

    format_version: int
    name: str
    run_id: str
    simulated: bool  # the config said so, or the simulator answered a call the release uses
    license: str
    config_fingerprint: str
    config: dict
    seeds: dict[str, int]
    models: dict[str, str]
    prompts: dict[str, dict]
    packages: dict[str, str]
    funnel: list[FunnelStep]
    drop_reasons: dict[str, int]
    per_category: dict[str, int]
    num_bytes: dict[str, int]
    stats: dict
    annotation: dict
    tokens: dict
    cost: dict
    files: dict[str, str] = {}
    # the model-free probes on the released rows (leakage, floors): verdict, n, intervals
    validity: dict = {}
    # the judge's rates on the calibration set (pipeline/qualification.py); {}: not run
    judge_qualification: dict = {}
    served_by: list[str] = []  # what answered those calls: prb-simulator, endpoint

    @property
    def counts(self) -> dict[str, int]:
        return {f.stage: f.count for f in self.funnel}

    def dumps(self) -> str:
        return (
            json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True, ensure_ascii=False)
            + "\n"
        )


def load(release: Path) -> Manifest:
    path = Path(release) / "manifest.json"
    try:
        return Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PrbError(f"{path}: not a readable release manifest ({type(e).__name__})") from None


def funnel(counts: dict[str, int]) -> list[FunnelStep]:
    return [FunnelStep(stage=k, count=v) for k, v in counts.items()]


def write_funnel(
    run_dir: Path,
    counts: dict[str, int],
    lost: dict[str, dict[str, int]],
    changed: dict[str, dict[str, int]] | None = None,
) -> None:
    """The build's funnel beside its stage files: each row's count, why records were lost and
    what was rewritten on the way (`changed`: the artifact gate's new rejected answers)."""
    from pipeline.store import atomic_write

    changed = changed or {}
    rows = [
        {
            "stage": k,
            "count": n,
            "reasons": dict(sorted(lost.get(k, {}).items(), key=lambda kv: -kv[1])),
        }
        | ({"changed": changed[k]} if changed.get(k) else {})
        for k, n in counts.items()
    ]
    with atomic_write(Path(run_dir) / FUNNEL_FILE) as f:
        json.dump(rows, f, indent=2)


def read_funnel(run_dir: Path) -> list[dict] | None:
    path = Path(run_dir) / FUNNEL_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out
