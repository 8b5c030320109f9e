"""The `prb` command line: one module per command group, each only wiring (parse, call the
pipeline, print). `app` is the console script's entry point (`pipeline.cli:app`)."""

# each module registers its commands on `app`, in this order in `prb --help`
from pipeline.cli import build, servers, annotate, release, audit, eval  # noqa: F401, I001
from pipeline.cli.common import app
from pipeline.cli.personas import app as personas_app

app.add_typer(eval.app, name="eval")
app.add_typer(personas_app, name="personas")

__all__ = ["app"]
