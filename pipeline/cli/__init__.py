"""The `prb` command line: one module per command group, each only wiring (parse, call the
pipeline, print). `main` is the console script's entry point (`pipeline.cli:main`)."""

# each module registers its commands on `app`, in this order in `prb --help`
from pipeline.cli import build, servers, annotate, release, audit, eval  # noqa: F401, I001
from pipeline.cli.common import app
from pipeline.cli.personas import app as personas_app

app.add_typer(eval.app, name="eval")
app.add_typer(personas_app, name="personas")

__all__ = ["app", "main"]

BROKEN_PIPE = 141  # what a shell reports for a tool whose reader stopped reading (128 + SIGPIPE)


def main() -> None:
    """`prb`: the app; a reader that stops reading (`prb … | head`) ends prb quietly with 141,
    as it ends any Unix tool (rich's own answer is exit 1, Python's "Exception ignored")."""
    import os
    import sys

    try:
        try:
            app()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush
        sys.exit(BROKEN_PIPE)
    except SystemExit as e:  # rich met the broken pipe first and exits 1
        if isinstance(e.__context__, BrokenPipeError):
            sys.exit(BROKEN_PIPE)
        raise
