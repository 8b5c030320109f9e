"""Anthropic's Messages API (`model.provider: anthropic`), through the official `anthropic`
client: the system prompt goes apart, a JSON task's schema as `output_config.format`
(structured outputs), stop reasons and usage are mapped to the OpenAI names the rest of prb
reads, and the `anthropic-ratelimit-*` headers to the `x-ratelimit-*` ones the limiter learns
from. No batch mode here (use `--mode online`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import anthropic
import httpx2

from pipeline.calls import TASK_HEADER, Reply, Request, Unparseable
from pipeline.llm.backends.base import classify
from pipeline.sim import FINGERPRINT as SIMULATOR

VERSION = "2023-06-01"
PERMANENT = (
    anthropic.AuthenticationError,
    anthropic.PermissionDeniedError,
    anthropic.NotFoundError,
)
BAD_REQUEST = (anthropic.BadRequestError, anthropic.UnprocessableEntityError)
STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def body(req: Request) -> dict:
    """The Messages API body of a prb request (OpenAI's shape): system apart, the output schema
    as structured output, `seed` dropped (the API has none)."""
    system = "\n\n".join(m["content"] for m in req.messages if m["role"] == "system")
    out = {
        "model": req.model,
        "max_tokens": int(req.params.get("max_tokens") or 1024),
        "messages": [m for m in req.messages if m["role"] != "system"],
    }
    if system:
        out["system"] = system
    if req.params.get("temperature") is not None:
        out["temperature"] = req.params["temperature"]
    fmt = req.params.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
    if schema:
        out["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return out


def read_message(raw: bytes) -> tuple[str, str | None, dict]:
    try:
        data = json.loads(raw)
        text = "".join(b.get("text", "") for b in data["content"] if b.get("type") == "text")
        usage = data.get("usage") or {}
        tokens = {
            "prompt_tokens": usage.get("input_tokens", 0),
            "completion_tokens": usage.get("output_tokens", 0),
        }
        if usage.get("cache_read_input_tokens"):
            tokens["prompt_tokens_details"] = {"cached_tokens": usage["cache_read_input_tokens"]}
    except (ValueError, LookupError, TypeError, AttributeError) as e:
        raise Unparseable(f"response body is not a message: {type(e).__name__}") from None
    if data.get("system_fingerprint") == SIMULATOR:  # only the simulator sends one
        tokens["served_by"] = SIMULATOR
    return text, STOP.get(data.get("stop_reason"), data.get("stop_reason")), tokens


def limit_headers(headers) -> dict[str, str]:
    """Anthropic's rate-limit headers under the names the limiter reads."""
    h = {k.lower(): v for k, v in headers.items()}
    out = {k: v for k, v in h.items() if k in ("retry-after", "retry-after-ms")}
    for dim in ("requests", "tokens"):
        for part in ("limit", "remaining"):
            if (v := h.get(f"anthropic-ratelimit-{dim}-{part}")) is not None:
                out[f"x-ratelimit-{part}-{dim}"] = v
        if (reset := h.get(f"anthropic-ratelimit-{dim}-reset")) is not None:
            try:  # an RFC 3339 time: the seconds until then
                at = datetime.fromisoformat(reset.replace("Z", "+00:00"))
                left = (at - datetime.now(UTC)).total_seconds()
                out[f"x-ratelimit-reset-{dim}"] = f"{max(0.0, left):.3f}"
            except ValueError:
                pass
    return out


class AnthropicBackend:
    name = "anthropic"
    batch = False

    def __init__(self, cfg, concurrency: int):
        self.cfg = cfg
        base = (cfg.base_url or "").rstrip("/").removesuffix("/v1") or None
        self.client = anthropic.AsyncAnthropic(
            base_url=base,
            api_key=cfg.api_key.get_secret_value(),
            max_retries=0,
            timeout=cfg.timeout_s,
            http_client=anthropic.DefaultAsyncHttpxClient(
                limits=httpx2.Limits(
                    max_connections=concurrency, max_keepalive_connections=concurrency
                )
            ),
        )

    async def send(self, req: Request) -> Reply:
        try:
            response = await self.client.post(
                "/v1/messages",
                cast_to=httpx2.Response,
                body=body(req),
                options={"headers": {TASK_HEADER: req.task, "anthropic-version": VERSION}},
            )
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
            raise classify(
                e, self.cfg, permanent=PERMANENT, bad_request=BAD_REQUEST, headers=limit_headers
            ) from None
        content, finish_reason, tokens = read_message(response.content)
        return Reply(
            response.status_code, limit_headers(response.headers), content, finish_reason, tokens
        )

    async def aclose(self) -> None:
        await self.client.close()
