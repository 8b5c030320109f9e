"""llama-cpp-python's OpenAI-compatible server run through prb's `serving` (what `python -m
llama_cpp.server` does, with prb's shutdown): SIGTERM lets requests finish within the grace and
answers those still running 503 with Retry-After, where llama.cpp's own entry point left the
client a dropped connection. `python -m pipeline.llm.local_server <llama_cpp.server options>`;
`local.command` builds the line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
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
