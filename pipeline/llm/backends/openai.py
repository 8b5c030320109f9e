"""OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp's server, Ollama, the
simulator), through the official `openai` client; the only backend with a batch mode."""

from __future__ import annotations

import json

import httpx2  # the HTTP library of this openai release
import openai

from pipeline.calls import TASK_HEADER, Reply, Request, Unparseable, split_reasoning
from pipeline.llm import ratelimit
from pipeline.llm.backends.base import classify
from pipeline.sim import FINGERPRINT as SIMULATOR

PERMANENT = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)
BAD_REQUEST = (openai.BadRequestError, openai.UnprocessableEntityError)


def first_top_logprobs(body: bytes | dict | None) -> list[dict] | None:
    """The first generated token's alternatives of a chat completion (`logprobs: true,
    top_logprobs: k`), as [{token, logprob}]; None if it has none."""
    try:
        data = json.loads(body) if isinstance(body, bytes | str) else body
        first = data["choices"][0]["logprobs"]["content"][0]
        return [
            {"token": str(t["token"]), "logprob": float(t["logprob"])}
            for t in first["top_logprobs"]
        ]
    except (ValueError, LookupError, TypeError, AttributeError):
        return None


def read_completion(body: bytes | dict | None) -> tuple[str, str | None, dict]:
    """Content, finish reason and token usage of a chat completion (its JSON body, or that body
    parsed). A truncated, garbled or non-completion body is transient, like a 5xx.

    Reasoning (a `reasoning_content` / `reasoning` field, `<think>` blocks in the content) is
    taken out of the content, so it never reaches parsing or the floor, and counted in
    `reasoning_tokens` (the endpoint's figure where it gives one, else counted here)."""
    try:
        data = json.loads(body) if isinstance(body, bytes | str) else body
        choices = data["choices"]
        choice = choices[0] if choices else {}
        message = choice.get("message") or {}
        content = message.get("content") or ""
        separate = message.get("reasoning_content") or message.get("reasoning") or ""
        tokens = data.get("usage") or {}
        if not isinstance(content, str) or not isinstance(tokens, dict):
            raise TypeError(type(content).__name__)
        thought, content = split_reasoning(content)
        reasoning = "\n".join(t for t in (str(separate).strip(), thought) if t)
        if reasoning:
            details = tokens.get("completion_tokens_details") or {}
            reported = details.get("reasoning_tokens") if isinstance(details, dict) else None
            counted = ratelimit.text_tokens(reasoning)
            tokens = {**tokens, "reasoning_tokens": reported or counted}
    except (ValueError, LookupError, TypeError, AttributeError) as e:
        raise Unparseable(f"response body is not a chat completion: {type(e).__name__}") from None
    if data.get("system_fingerprint") == SIMULATOR:
        # kept with the usage in the cache: the release says what answered, not the config
        tokens = {**tokens, "served_by": SIMULATOR}
    return content, choice.get("finish_reason"), tokens


def served_models(cfg) -> list[str] | None:
    """The model ids the endpoint of `cfg` lists (`/v1/models`); None where it lists none or
    cannot be asked."""
    try:
        with openai.OpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key.get_secret_value(),
            max_retries=0,
            timeout=min(30.0, cfg.timeout_s),
        ) as client:
            return [m.id for m in client.models.list().data] or None
    except openai.OpenAIError:
        return None


class OpenAIBackend:
    name = "openai"
    batch = True  # the Batch API (pipeline/llm/batch.py) speaks this protocol

    def __init__(self, cfg, concurrency: int):
        self.cfg = cfg
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key.get_secret_value(),
            max_retries=0,  # tenacity owns retries, so they are counted and bounded in one place
            timeout=cfg.timeout_s,
            # openai's aiohttp transport: httpcore's per-request pool bookkeeping cost ~1 ms of
            # CPU per call here, the client's main limit (bench/throughput.py)
            http_client=openai.DefaultAioHttpClient(
                limits=httpx2.Limits(
                    max_connections=concurrency, max_keepalive_connections=concurrency
                )
            ),
        )

    async def context_window(self, model: str) -> int | None:
        """The server's context window for `model`, where its model list says it (vLLM's
        `max_model_len`); None otherwise."""
        try:
            page = await self.client.models.list()
        except openai.OpenAIError:
            return None
        for m in page.data:
            if m.id == model and isinstance((m.model_extra or {}).get("max_model_len"), int):
                return m.model_extra["max_model_len"]
        return None

    async def send(self, req: Request) -> Reply:
        try:
            # the client's generic `post` for the chat-completions endpoint, returning the raw
            # response: the same request and errors as `chat.completions.create` without its
            # recursive transform of `messages` and typed build of the answer (~2 ms of CPU
            # per call; bench/throughput.py)
            response = await self.client.post(
                "/chat/completions",
                cast_to=httpx2.Response,
                body=req.body(),
                options={"headers": {TASK_HEADER: req.task}},
            )
        except (openai.APIStatusError, openai.APIConnectionError) as e:
            raise classify(e, self.cfg, permanent=PERMANENT, bad_request=BAD_REQUEST) from None
        content, finish_reason, tokens = read_completion(response.content)
        headers = {k.lower(): v for k, v in response.headers.items()}
        top = first_top_logprobs(response.content) if req.params.get("logprobs") else None
        return Reply(response.status_code, headers, content, finish_reason, tokens, top)

    async def aclose(self) -> None:
        await self.client.close()
