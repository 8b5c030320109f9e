"""Issue 38: the grammar the docs teach is the parser's grammar. Every `prb` command in
README.md's code blocks parses as written (its subcommands, options, values and arguments),
every command and option named inline in README.md or in a command's help exists, and every
`make` target the README names is in the Makefile. Parsing runs the CLI's own click context:
no command is run, so an example whose run needs a build or a network still counts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from pipeline.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI = typer.main.get_command(app)


def code_examples() -> list[str]:
    """`prb …` lines of the fenced code blocks, continuation lines joined, comments cut."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#\s", line)[0].strip()
            if m := re.match(r"^(?:\.venv/bin/)?prb (.*)$", line):
                found.append(m.group(1))
    return found


def inline_mentions() -> list[tuple[str, str]]:
    """(where, `prb …` text) of every inline mention, in the README and in every help text."""

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        yield " ".join(path), cmd

    found = [("README.md", m) for m in re.findall(r"`prb ([^`]+)`", README)]
    for path, cmd in walk(CLI, ["prb"]):
        found += [(f"{path} --help", m) for m in re.findall(r"`prb ([^`]+)`", cmd.help or "")]
    return found


def resolve(args: list[str]):
    """The (sub)command the words name, and the words left for it."""
    cmd = CLI
    while hasattr(cmd, "commands") and args:
        if args[0] in cmd.commands:
            cmd = cmd.commands[args.pop(0)]
        elif getattr(cmd, "default", None) and not args[0].startswith("-"):
            cmd = cmd.commands[cmd.default]  # `prb eval RELEASE`: the group's default
        else:
            break
    return cmd, args


def parse_error(words: list[str]) -> str | None:
    cmd, args = resolve(list(words))
    if cmd.name == "sim-server":  # its own argparse parser, shared with python -m pipeline.sim
        return sim_server_error(args)
    try:
        with cmd.make_context("prb", args):
            return None
    except Exception as e:  # noqa: BLE001  (click's usage errors, whatever their class)
        if type(e).__name__ == "Exit":
            return None
        return e.format_message() if hasattr(e, "format_message") else str(e)


def sim_server_error(args: list[str]) -> str | None:
    import contextlib
    import io

    from pipeline.sim.server import arguments

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            arguments().parse_args(args)
    except SystemExit as e:
        return None if e.code == 0 else said.getvalue().strip().splitlines()[-1]
    return None


def options_of(cmd) -> set[str]:
    if cmd.name == "sim-server":
        from pipeline.sim.server import arguments

        return {o for a in arguments()._actions for o in a.option_strings}
    return {"--help", *(o for p in cmd.params for o in [*p.opts, *p.secondary_opts])}


def test_the_readme_has_examples_to_check_and_the_checker_can_fail():
    assert len(code_examples()) >= 20 and len(inline_mentions()) >= 30
    assert "--nope" in parse_error(["audit", "x", "--nope"])
    assert "--bootstrap" in parse_error(["eval", "R", "--bootstrap", "-3"])
    assert "--rate-429" in parse_error(["sim-server", "--rate-429", "-1"])
    assert "--nope" in parse_error(["sim-server", "--nope"])
    assert parse_error(["sim-server", "--port", "0", "--leaky"]) is None


@pytest.mark.parametrize("example", code_examples())
def test_every_readme_code_example_parses_as_written(example):
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", example))  # `[--x]`: shown as optional
    assert parse_error(words) is None, f"README.md: `prb {example}`"


def test_every_command_and_option_named_inline_exists():
    """A mention names a command (`prb audit`), maybe with options (`--position-free`);
    `a | b` lists sibling subcommands and `--x/--y` two options."""
    missing = []
    for where, text in inline_mentions():
        first, *alternatives = [part.strip() for part in text.split(" | ")]
        words = shlex.split(first.replace("[", " ").replace("]", " ").replace("/--", " --"))
        cmd, rest = resolve(list(words))
        parent = words[: len(words) - len(rest) - 1]
        for alt in alternatives:  # siblings of the first mention's last subcommand
            sub, _ = resolve([*parent, *shlex.split(alt)])
            if sub is cmd or sub is CLI:
                missing.append(f"{where}: `prb {text}`: no subcommand {alt.split()[0]!r}")
        if rest and rest[0][:1].isalpha() and hasattr(cmd, "commands"):
            missing.append(f"{where}: `prb {text}`: no subcommand {rest[0]!r}")
        options = options_of(cmd)
        for word in rest:
            for option in re.findall(r"--[a-z][a-z0-9-]*", word.split("=")[0]):
                if option not in options:
                    missing.append(f"{where}: `prb {text}`: no option {option}")
    assert not missing, "\n".join(missing)


def test_every_make_target_the_readme_names_is_in_the_makefile():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([a-z][a-z0-9-]*)`|^make ([a-z][a-z0-9-]*)", README, re.M))
    named = {a or b for a, b in named}
    assert named and named <= targets, sorted(named - targets)
