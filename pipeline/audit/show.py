"""`prb show PAIR_ID`: everything about one pair, from the run's stage files and the response
cache: persona, profile, aspects, both answers, the filter verdict, and every model call that
made or judged it (prompt, raw answer, parsed output).
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pipeline.audit.report import AuditError, resolve_run
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import PromptError, load_prompt
from pipeline.llm.structured import parse_output
from pipeline.paths import resolve_path
from pipeline.records import Pair
from pipeline.stages import call_order, stage
from pipeline.text import terminal


def _find_pair(run_dir: Path, pair_id: str) -> Pair | None:
    return next((p for p in stage("pairs").file(run_dir).read() if p.pair_id == pair_id), None)


def find_run(pair_id: str, run: str | None = None) -> Path:
    """The run holding the pair: the given one, or the newest run under outputs/ that has it."""
    if run is not None:
        run_dir = resolve_run(run)
        if _find_pair(run_dir, pair_id) is None:
            raise AuditError(f"{run_dir / 'pairs.jsonl'}: no pair {pair_id}")
        return run_dir
    outputs = resolve_path("outputs")
    runs = sorted(outputs.glob("*/pairs.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in runs:
        if pair_id in path.read_text(encoding="utf-8"):
            return path.parent
    raise AuditError(f"no run under {outputs} has pair {pair_id}; pass --run")


def _call(cache: ResponseCache | None, name: str, key: str) -> dict:
    entry = cache.lookup(key) if cache else None
    if entry is None:
        return {"name": name, "key": key, "missing": "not in the response cache"}
    parsed: object
    try:
        schema = load_prompt(entry["task"]).output
        value = parse_output(entry["content"], schema)
        parsed = value.model_dump(mode="json") if schema else None
    except (PromptError, Exception) as e:  # a stale or garbled entry is shown, not fatal
        parsed = {"unparseable": str(e)}
    return {
        "name": name,
        "key": key,
        "task": entry["task"],
        "model": entry["model"],
        "messages": entry["request"]["messages"],
        "params": entry["request"].get("params", {}),
        "raw": entry["content"],
        "parsed": parsed,
    }


def collect(pair_id: str, run: str | None = None) -> dict:
    run_dir = find_run(pair_id, run)
    pair = _find_pair(run_dir, pair_id)
    if pair is None:
        raise AuditError(f"{run_dir / 'pairs.jsonl'}: no pair {pair_id}")
    rubric = next(
        (r for r in stage("rubrics").file(run_dir).read() if r.task.task_id == pair.task.task_id),
        None,
    )
    verdicts = [f for f in stage("filters").file(run_dir).read() if f.pair.pair_id == pair_id]
    verdict = verdicts[-1] if verdicts else None  # a retried pair's last verdict counts
    cache_path = run_dir.parent / "cache.sqlite"  # RunConfig.cache_path: outputs_dir/cache.sqlite
    cache = ResponseCache(cache_path) if cache_path.exists() else None
    keys = {**(rubric.calls if rubric else {}), **pair.calls, **(verdict.calls if verdict else {})}
    order = call_order()  # the order calls happened in (record files sort their keys)
    try:
        names = sorted(keys, key=lambda n: (order.index(n) if n in order else 99, n))
        calls = [_call(cache, name, keys[name]) for name in names]
    finally:
        if cache:
            cache.close()
    return {
        "run_dir": str(run_dir),
        "pair": pair.model_dump(mode="json"),
        "ungrounded_aspects": [a.model_dump() for a in rubric.ungrounded_aspects] if rubric else [],
        "generic_aspects": [a.model_dump() for a in rubric.generic_aspects] if rubric else [],
        "filter": None
        if verdict is None
        else verdict.model_dump(
            mode="json", include={"kept", "reasons", "flags", "errors", "checks", "skipped"}
        ),
        "calls": calls,
    }


def inert(value):
    """Every string of a pair's record as a terminal shows it: control characters and escape
    sequences as visible escapes (line breaks kept), never obeyed (an imported narrative held
    ESC ] 0; and ESC [31m)."""
    if isinstance(value, str):
        return terminal(value, lines=True)
    if isinstance(value, dict):
        return {inert(k): inert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [inert(v) for v in value]
    return value


def render(info: dict, console: Console) -> None:
    info = inert(info)
    p = info["pair"]
    task, persona = p["task"], p["task"]["persona"]
    console.rule(f"[bold]{escape(p['pair_id'])}[/bold]  ({escape(info['run_dir'])})")
    console.print(
        f"[bold]persona[/bold] {escape(persona['persona_id'])} — {escape(persona['name'])} "
        f"({escape(persona['category'])})\n{escape(persona['summary'])}"
    )
    profile = Table("id", "profile item", title="profile", show_lines=False)
    for item in persona["profile"]:
        profile.add_row(Text(item["id"]), Text(item["text"]))
    console.print(profile)
    console.print(
        f"[bold]question[/bold] ({escape(task['question_id'])}): {escape(task['question'])}"
    )
    aspects = Table("#", "aspect", "evidence", "reason", title="rubric aspects")
    for i, a in enumerate(p["rubric_aspects"], 1):
        aspects.add_row(str(i), *(Text(a[k]) for k in ("aspect", "evidence", "reason")))
    console.print(aspects)
    for a in info["ungrounded_aspects"]:
        console.print(
            f"[yellow]ungrounded (not used):[/yellow] {escape(a['aspect'])} — "
            f"{escape(a['evidence'])}"
        )
    for a in info["generic_aspects"]:
        console.print(f"[yellow]generic (not used):[/yellow] {escape(a['aspect'])}")
    console.print(f"[bold]narrative[/bold] {escape(p['narrative'])}")
    console.print(
        "[bold]key points[/bold]\n" + "\n".join(f"- {escape(k)}" for k in p["key_points"])
    )
    console.print(Panel(Text(p["chosen"]), title="chosen", border_style="green"))
    console.print(
        Panel(
            Text(p["rejected"]),
            title=f"rejected ({escape(p['rejected_strategy'])})",
            border_style="red",
        )
    )
    f = info["filter"]
    if f is None:
        console.print("[yellow]not through the filters stage yet[/yellow]")
    else:
        state = "[green]kept[/green]" if f["kept"] else "[red]dropped[/red]"
        console.print(
            f"[bold]filters[/bold] {state}; reasons: {escape(', '.join(f['reasons']) or '-')}; "
            f"flags: {escape(', '.join(f['flags']) or '-')}; not run (dropped before them): "
            f"{escape(', '.join(f.get('skipped', [])) or '-')}"
        )
        for name, err in f["errors"].items():
            console.print(f"[red]{name} failed:[/red] {escape(err)}")
        console.print_json(json.dumps(f["checks"]))
    for c in info["calls"]:
        title = f"{c['name']} · {c.get('task', '?')} · {c.get('model', '?')} · {c['key'][:12]}"
        console.rule(escape(title))
        if "missing" in c:
            console.print(f"[yellow]{escape(c['missing'])}[/yellow]")
            continue
        for m in c["messages"]:
            console.print(
                Panel(Text(m["content"]), title=f"prompt: {m['role']}", border_style="dim")
            )
        console.print(Panel(Text(c["raw"]), title="raw answer", border_style="cyan"))
        if c["parsed"] is not None:
            console.print("parsed:")
            console.print_json(json.dumps(c["parsed"]))
