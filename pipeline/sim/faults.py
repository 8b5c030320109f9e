"""The simulator's extra faults: the ways a real endpoint, or the proxy in front of it, fails.

`server.py` draws the classic ones (429, 500, malformed content, slow); these are drawn from the
same seeded generator, per attempt, so a retry can succeed. A second draw happens only when one
of these rates is set, so older seeded fault sequences stay as they were.

- 502 / 503: a gateway's error page;
- reset: headers sent, then the connection is dropped before any body;
- truncated: a 200 whose JSON body is cut in half;
- non_json: a 200 with an HTML page (a captive proxy);
- wrong_schema: a well-formed completion whose content is JSON in the wrong shape
  (JSON tasks only: for a plain-text task any text is a valid answer);
- content_filter: `finish_reason: "content_filter"` with no content, as providers refuse;
- `require_key`: every request without `Authorization: Bearer <key>` (or Anthropic's
  `x-api-key: <key>`) gets 401.
"""

from __future__ import annotations

import json
import logging
import random

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

EXTRA_RATES = (
    "rate_502",
    "rate_503",
    "rate_reset",
    "rate_truncated",
    "rate_non_json",
    "rate_wrong_schema",
    "rate_content_filter",
)


class SimulatedDisconnect(Exception):
    """Raised after the response started: uvicorn then closes the connection mid-response."""


class _QuietDisconnects(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimulatedDisconnect)


logging.getLogger("uvicorn.error").addFilter(_QuietDisconnects())


class DropConnection(Response):
    async def __call__(self, scope, receive, send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"500")],
            }
        )
        raise SimulatedDisconnect


def draw(opts, rng: random.Random) -> str | None:
    """The extra fault for this attempt, if any ("502", "reset", ...)."""
    rates = [(name, getattr(opts, name)) for name in EXTRA_RATES]
    if not any(rate for _, rate in rates):
        return None
    roll, edge = rng.random(), 0.0
    for name, rate in rates:
        edge += rate
        if roll < edge:
            fault = name.removeprefix("rate_")
            opts.stats[f"fault_{fault}"] += 1
            return fault
    return None


def before_answer(opts, fault: str | None, request: Request) -> Response | None:
    """A response that replaces the answer, or None to answer normally."""
    sent = request.headers.get("x-api-key") or request.headers.get("authorization", "")
    if opts.require_key and sent.removeprefix("Bearer ") != opts.require_key:
        opts.stats["fault_401"] += 1
        return JSONResponse(
            {
                "error": {
                    "message": "Incorrect API key provided.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
            status_code=401,
        )
    if fault in ("502", "503"):
        return HTMLResponse(f"<html><body><h1>{fault}</h1>gateway</body></html>", int(fault))
    if fault == "reset":
        return DropConnection()
    if fault == "non_json":
        return HTMLResponse("<html><body>Please log in to the proxy</body></html>", 200)
    return None


def after_answer(fault: str | None, payload: dict) -> Response | dict:
    """The answer as sent: whole, or spoiled by a body-level fault."""
    choice = payload["choices"][0]
    if fault == "wrong_schema" and choice["message"]["content"].lstrip().startswith("{"):
        choice["message"]["content"] = json.dumps({"answer": "valid JSON, wrong shape"})
    elif fault == "content_filter":
        choice["finish_reason"] = "content_filter"
        choice["message"]["content"] = None
    elif fault == "truncated":
        body = json.dumps(payload)
        return Response(body[: len(body) // 2], media_type="application/json")
    return payload
