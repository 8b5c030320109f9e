"""What every command shares: the app, the consoles, one-line errors and exit codes (see
pipeline/errors.py), and the run config a command's judges use."""

from __future__ import annotations

import functools
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.paths import DATA
from pipeline.text import terminal

app = typer.Typer(help="Build Personalized RewardBench-style benchmarks.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


def finite(value: float | None) -> float | None:
    """A float option's callback: NaN passes every range check, so it is refused here."""
    if value is not None and value != value:
        raise typer.BadParameter("not a number (nan)")
    return value


def fail(message: str, code: int) -> typer.Exit:
    """One line on stderr, then the exit code (see pipeline/errors.py for the codes)."""
    errors.print(f"[red]error:[/red] {escape(terminal(message))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(fn):
    """Every command: an error the user can act on is one line and an exit code; anything else
    is a bug, and still one line (exit 70) naming the file that holds its traceback."""

    @functools.wraps(fn)
    def command(*args, **kwargs):
        # nothing heavy here: a bad option must fail in a blink, not after importing Prefect
        from typer.exceptions import TyperException

        from pipeline.errors import DiskFullError, PrbError, is_disk_full, is_termination

        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise fail("interrupted; nothing finished is lost", 130) from None
        except (typer.Exit, typer.Abort, TyperException):  # typer's own exits and usage errors
            raise
        except BrokenPipeError:  # the reader of stdout left (`| head`): cli.main ends quietly
            raise
        except BaseException as e:
            if is_termination(e):
                raise fail("terminated; nothing finished is lost", 143) from None
            if isinstance(e, SystemExit | GeneratorExit):
                raise
            if isinstance(e, PrbError):
                raise fail(str(e), e.exit_code) from None
            if is_disk_full(e):
                full = DiskFullError(getattr(e, "filename", None) or "the outputs folder")
                raise fail(str(full), full.exit_code) from None
            if isinstance(e, OSError) and e.filename:
                raise fail(f"{e.filename}: {e.strerror}", 2) from None
            raise internal_error(e) from None

    return command


def internal_error(e: BaseException) -> typer.Exit:
    """A bug: one line naming a file with the traceback (PRB_TRACEBACK=1: raise it here)."""
    import os
    import tempfile
    import traceback

    if os.environ.get("PRB_TRACEBACK"):
        raise e
    fd, path = tempfile.mkstemp(prefix="prb-error-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(e)))
    said = (str(e).strip().splitlines() or [""])[0][:200]
    return fail(
        f"internal error ({type(e).__name__}: {said}); a bug in prb, please report it "
        f"with the traceback in {path}",
        70,
    )


def judge_config(stack, config: Path | None, sim: bool, base_url: str | None, **changes):
    """The run config a command's judges use: `config` (default.yaml; demo.yaml with --sim),
    checked before anything starts; with `sim`, pointed at a simulator that `stack` stops."""
    from pipeline.config import load_config

    config = config or DATA / "configs" / ("demo.yaml" if sim else "default.yaml")
    cfg = load_config(config, model__base_url=base_url, **changes)
    if sim:
        from pipeline.sim.server import running

        cfg = load_config(config, **changes, model__base_url=stack.enter_context(running()))
    return cfg
