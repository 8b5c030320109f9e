"""What `prb eval` writes: leaderboards as Markdown and CSV, and the accuracy plot. Shared by
pairwise accuracy (evaluate.py), Best-of-N (bon.py) and RL (rl.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import csvfile
from pipeline.eval.protocol import PROTOCOLS
from pipeline.reports import md


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")


def leaderboard(results: list[dict]) -> pd.DataFrame:
    rows = []
    for r in results:
        m = r["metrics"]
        row = {
            "model": r["model"],
            "context": r["context"],
            "accuracy": m["accuracy"],
            "ci_low": m["ci_low"],
            "ci_high": m["ci_high"],
        }
        row |= {f"acc_{c}": v["accuracy"] for c, v in m["per_category"].items()}
        row |= {
            "longer_preferred": m["longer_preferred"],
            "chosen_as_a": m.get("chosen_as_a", math.nan),
            "chosen_as_b": m.get("chosen_as_b", math.nan),
            "ties": m["ties"],
            "errors": m["errors"],
            "n": m["n"],
            # of the answers scored, how many had their user context cut to fit the model,
            # and the tokens cut per cut context (NaN: a model that does not truncate)
            "contexts_cut": (r.get("truncation") or {}).get("cut", math.nan),
            "cut_tokens_mean": _per_cut(r.get("truncation")),
            # the published protocol cuts inputs from the right: answers that lost their end
            "answers_cut": (r.get("truncation") or {}).get("answers_cut", math.nan),
            "unparsed": math.nan if r.get("unparsed") is None else r["unparsed"],
            "protocol": r.get("protocol", "prb"),  # pipeline/eval/protocol.py
            "tie_rule": PROTOCOLS[r.get("protocol", "prb")].tie_rule,
            "blind_of": r.get("blind_of"),
        }
        rows.append(row)
    # by accuracy, each judge's blind variant (context none) on the row after it, with the
    # accuracy the user adds (`needs_user`: with the user minus without) on the judge's row
    blind = {r["blind_of"]: r for r in rows if r["blind_of"]}
    order = sorted(
        (r for r in rows if not r["blind_of"]), key=lambda r: (-r["accuracy"], r["model"])
    )
    out = []
    for r in order:
        b = blind.get(r["model"])
        r["needs_user"] = r["accuracy"] - b["accuracy"] if b else math.nan
        out += [r, {**b, "needs_user": math.nan}] if b else [r]
    df = pd.DataFrame(out).drop(columns=["blind_of"])
    return df.reset_index(drop=True)


def _per_cut(t: dict | None) -> float:
    if not t:
        return math.nan
    cuts = t["cut"] + t.get("answers_cut", 0)
    return t["tokens_cut"] / cuts if cuts else 0.0


def to_markdown(df: pd.DataFrame, title: str, notes: list[str] = ()) -> str:
    """A leaderboard as Markdown; model names and categories (foreign data) escaped."""

    def cell(v) -> str:
        if isinstance(v, float):
            return "–" if math.isnan(v) else f"{v:.3f}"
        return md(v)

    lines = [f"# {title}", "", *notes, "" if notes else ""]  # notes: prb's own Markdown
    lines.append("| " + " | ".join(map(md, df.columns)) + " |")
    lines.append("|" + "---|" * len(df.columns))
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_table(df: pd.DataFrame, title: str, notes: list[str], paths: dict[str, Path]) -> None:
    """A results table as Markdown, with its notes, and as CSV (`paths`' markdown and csv):
    the leaderboard's, Best-of-N's and RL's alike."""
    paths["markdown"].write_text(to_markdown(df, title, notes), "utf-8")
    csvfile.frame_csv(df, paths["csv"], float_format="%.4f")


def bar_plot(df: pd.DataFrame, path: Path, title: str) -> None:
    from pipeline.reports import pyplot

    plt = pyplot()

    df = df.iloc[::-1]  # best at the top
    labels = df["model"].tolist()
    acc = df["accuracy"].to_numpy()
    err = np.vstack([acc - df["ci_low"].to_numpy(), df["ci_high"].to_numpy() - acc])
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(df) + 1.5))
    ax.barh(labels, acc, xerr=np.nan_to_num(err), color="#4c72b0", capsize=3)
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1, label="chance (0.5)")
    ax.set_xlim(0, 1)
    ax.set_xlabel("pairwise accuracy (chosen strictly above rejected), 95% bootstrap CI")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
