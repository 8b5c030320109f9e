"""The seam between prb's call path (pipeline/llm/client.py: cache, retries, rate limits,
usage) and a provider's protocol. A backend is one class in one file of this folder:

- `__init__(cfg, concurrency)`: its official client for `cfg` (a ModelConfig);
- `async send(request) -> Reply`: one request, no retries; a failure raised as an
  `EndpointError` (transient / permanent / bad_request, with the rate-limit headers in
  OpenAI's names: `classify` does it from the client's exception classes);
- `batch`: whether pipeline/llm/batch.py can queue its requests (the Batch API);
- `async aclose()`.

Registering it is one line in BACKENDS (pipeline/llm/backends/__init__.py); the config's
`model.provider` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from pipeline.calls import EndpointError, Reply, Request


class Backend(Protocol):
    name: str
    batch: bool

    def __init__(self, cfg, concurrency: int) -> None: ...

    async def send(self, req: Request) -> Reply: ...

    async def aclose(self) -> None: ...


def server_message(exc) -> str:
    """The error message a server sent with a 4xx/5xx (`{"error": {"message"}}`, as OpenAI-
    and Anthropic-style endpoints shape it)."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or getattr(exc, "message", "") or "").strip()[:300]


def describe_failure(exc: BaseException, base_url: str, timeout_s: float) -> str:
    """What went wrong with a call, in words a user can act on: a refused connection says so
    (the clients report it as a timeout), a status says its code and the server's message."""
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused at {base_url}"
        if isinstance(cause, OSError) and "Name or service not known" in str(cause):
            return f"cannot resolve the host of {base_url}"
        cause = cause.__cause__ or cause.__context__
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if status is not None:
        said = server_message(exc)
        said = "" if said.startswith("Error code:") else f": {said}"  # the client's own words
        return f"HTTP {status} from {base_url}{said}"
    if "Timeout" in name:
        return f"no answer within {timeout_s:g}s from {base_url}"
    if "Connection" in name:
        return f"connection to {base_url} failed ({exc})"
    return f"{name}: {exc}"


PLAIN_CAUSES = ("connection refused", "cannot resolve the host")


def classify(
    exc: BaseException,
    cfg,
    *,
    permanent: tuple[type, ...],
    bad_request: tuple[type, ...],
    headers: Callable[[Mapping[str, str]], dict[str, str]] = lambda h: {
        k.lower(): v for k, v in h.items()
    },
) -> EndpointError:
    """A client's exception as an EndpointError; anything not permanent or a bad request (429,
    5xx, timeouts, connections) is transient."""
    kind = (
        "permanent"
        if isinstance(exc, permanent)
        else "bad_request"
        if isinstance(exc, bad_request)
        else "transient"
    )
    response = getattr(exc, "response", None)
    detail = (
        server_message(exc)
        if kind != "transient"
        else describe_failure(exc, cfg.base_url, cfg.timeout_s)
    )
    return EndpointError(
        kind,
        detail,
        status=getattr(exc, "status_code", None),
        headers=headers(response.headers) if response is not None else {},
        # the retries count under the same words as the drop (some clients call a refused
        # connection a timeout)
        cause=next((w for w in PLAIN_CAUSES if detail.startswith(w)), type(exc).__name__),
    )
