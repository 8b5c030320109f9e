"""Issue 38: one exit-code table, README.md's, and every code prb can exit with is in it: each
error class's `exit_code`, each `typer.Exit(N)` and each literal code a command raises."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pipeline
from pipeline.errors import PrbError

ROOT = Path(__file__).resolve().parent.parent


def table() -> set[int]:
    """The codes of README.md's table (`| 2 | …`, `| 130 / 143 | …`)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([0-9 /]+) \|", text, re.M)
    return {int(code) for row in rows for code in row.split("/")}


def declared() -> dict[int, str]:
    """code -> where: every PrbError subclass's exit_code, every `Exit(N)`/`exit(N)` literal
    and every integer handed to an error as its code (`fail(…, 130)`, `Stopped(…, 143)`)."""
    for info in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if not info.name.startswith(("pipeline.sim.__main__", "pipeline.cli.__main__")):
            importlib.import_module(info.name)
    found: dict[int, str] = {}
    todo = [PrbError]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if isinstance(getattr(cls, "exit_code", None), int):
            found.setdefault(cls.exit_code, f"{cls.__module__}.{cls.__name__}")
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            codes = [a for a in node.args if isinstance(a, ast.Constant)]
            if name in ("Exit", "exit") and codes and isinstance(codes[0].value, int):
                found.setdefault(codes[0].value, f"{path.name}:{node.lineno}")
            elif name in ("fail", "Stopped") and len(node.args) > 1:
                code = node.args[1]
                if isinstance(code, ast.Constant) and isinstance(code.value, int):
                    found.setdefault(code.value, f"{path.name}:{node.lineno}")
    return found


def test_every_exit_code_prb_can_give_is_in_the_readme_table():
    codes = declared()
    assert {2, 4, 5, 6, 7, 8, 130, 143} <= set(codes), codes  # the walk finds what it must
    missing = {code: where for code, where in codes.items() if code not in table()}
    assert not missing, f"exit codes not in README.md's table: {missing}"


def test_the_table_lists_no_code_nothing_gives():
    unused = table() - set(declared()) - {0, 70}  # 0: done; 70: the crash handler's own
    assert not unused, unused
