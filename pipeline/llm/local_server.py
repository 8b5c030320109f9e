"""The local model's server, run through prb's `serving` so a stop drains like prb's own servers:
SIGTERM lets requests finish within the grace and answers those still running 503 with
Retry-After (llama.cpp's own entry points leave the client a dropped connection).

Two runtimes, one command line (`local.command` builds it):
- `python -m pipeline.llm.local_server <llama_cpp.server options>`: llama-cpp-python's server,
  one request at a time;
- `python -m pipeline.llm.local_server --llama-server BINARY --parallel N <options>`: llama.cpp's
  own server with N parallel slots (several sequences decoded in one forward pass) on a private
  port, behind a small proxy on the public one that `serving` drains; the child stops with it.
"""

from __future__ import annotations

import argparse
import sys

HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"host"}


def proxy(upstream: str):
    """An ASGI app that forwards every request to `upstream` and streams the answer back; a
    cancelled request (the drain) closes its upstream connection, which frees the slot."""
    import httpx

    client = httpx.AsyncClient(base_url=upstream, timeout=None)

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await client.aclose()  # lifespan.shutdown
            return await send({"type": "lifespan.shutdown.complete"})
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        query = scope.get("query_string", b"").decode()
        request = client.build_request(
            scope["method"],
            scope["path"] + (f"?{query}" if query else ""),
            headers=[(k, v) for k, v in scope["headers"] if k.lower() not in HOP],
            content=body,
        )
        answer = await client.send(request, stream=True)
        try:
            headers = [(k, v) for k, v in answer.headers.raw if k.lower() not in HOP]
            await send(
                {"type": "http.response.start", "status": answer.status_code, "headers": headers}
            )
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await answer.aclose()

    return app


def llama_server_command(args: argparse.Namespace, port: int) -> list[str]:
    return [
        args.llama_server,
        "--model",
        args.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--alias",
        args.model_alias,
        "--threads",
        str(args.n_threads),
        "--threads-batch",
        str(args.n_threads_batch),
        "--parallel",
        str(args.parallel),
        "--ctx-size",
        str(args.n_ctx * args.parallel),  # every slot keeps the context one request needs
        "--no-webui",
    ]


def serve_llama_server(argv: list[str]) -> None:
    from pipeline import serving
    from pipeline.errors import PrbError

    ap = argparse.ArgumentParser(prog="python -m pipeline.llm.local_server --llama-server")
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--parallel", type=int, required=True)
    for name, kind in [("model", str), ("host", str), ("port", int), ("model_alias", str)]:
        ap.add_argument(f"--{name}", type=kind, required=True)
    for name in ("n_threads", "n_threads_batch", "n_ctx"):
        ap.add_argument(f"--{name}", type=int, required=True)
    args = ap.parse_args(argv)
    inner = serving.free_port()
    try:
        serving.port_free(args.host, args.port)  # before the model loads, not after
        with serving.subprocess_server(
            llama_server_command(args, inner),
            f"http://127.0.0.1:{inner}/health",
            "llama-server",
            error=PrbError,
            startup_timeout=300,
            quiet=True,
            own_session=True,  # a Ctrl-C reaches us, who drain, not the slots
        ):
            app = proxy(f"http://127.0.0.1:{inner}")
            serving.serve(app, args.host, args.port, name="the local model server")
    except PrbError as e:
        sys.exit(f"error: {e}")


def main(argv: list[str] | None = None) -> None:
    import os
    import signal

    argv = sys.argv[1:] if argv is None else argv
    # the stop line is said; what stays is to unwind, so llama-server stops with its block
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    code: int | str | None = 0
    try:
        if "--llama-server" in argv:
            serve_llama_server(argv)
        else:
            serve_llama_cpp_python(argv)
    except KeyboardInterrupt:
        code = 130
    except SystemExit as e:
        code = e.code
    # a generation still running in llama-cpp-python's thread would hold the interpreter until
    # its answer ends (its client was answered 503 already): leave now
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def serve_llama_cpp_python(argv: list[str]) -> None:
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    from pipeline import serving
    from pipeline.errors import PrbError

    parser = argparse.ArgumentParser(prog="python -m pipeline.llm.local_server")
    add_args_from_model(parser, Settings)  # llama_cpp.server's own options, as it parses them
    args = parser.parse_args(argv)
    server = parse_model_from_args(ServerSettings, args)
    app = create_app(
        server_settings=server, model_settings=[parse_model_from_args(ModelSettings, args)]
    )
    try:
        serving.serve(app, server.host, server.port, name="the local model server")
    except PrbError as e:  # the port taken since `prb local-model serve` checked it
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
