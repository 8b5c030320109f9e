"""The one way to call a model: openai's async client against any OpenAI-compatible endpoint.

Bounded concurrency, tenacity retries (429/5xx/timeouts/connection errors/unparseable output,
honouring Retry-After), structured output parsed into pydantic models, a content-addressed
response cache, and token usage counted per stage. A 400/422 concerns one request (e.g. its
prompt is over the context length): that record is dropped with the server's message. Only
401/403/404 (bad key, no access, unknown model) stop the run. The API key is handed to the
client and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Protocol

import httpx2  # the HTTP library of this openai release
import openai
from pydantic import BaseModel, ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from pipeline import progress, ratelimit
from pipeline.cache import ResponseCache, cache_key
from pipeline.config import ModelConfig
from pipeline.errors import PrbError
from pipeline.prompts import Prompt
from pipeline.ratelimit import Limiter
from pipeline.sim import FINGERPRINT as SIMULATOR

log = logging.getLogger("prb.llm")

TASK_HEADER = "X-PRB-Task"  # lets the simulator (or a proxy) see which prompt a call uses
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


@functools.lru_cache(maxsize=64)
def _response_format(output: type[BaseModel] | None, mode: str) -> dict | None:
    return response_format(output, mode)  # the schema transform once per output model


class LLMError(Exception):
    """A call that failed after all retries; `kind` becomes the record's drop reason."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class PermanentLLMError(PrbError):
    """Retrying cannot help (bad key, no access, unknown model): the run must stop.

    Deliberately not an LLMError: stages turn LLMErrors into dropped records, and a bad key must
    stop the run, not drop every record."""

    exit_code = 4

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class Unparseable(Exception):
    """An answer that is not what was asked for (garbled, truncated, wrong schema): retried, and
    dropped as `<role>_unparseable` (asked again on resume) when retries run out."""


class CutOff(Unparseable):
    """An answer stopped at `max_tokens` (finish_reason=length): retried like any unparseable
    answer, and dropped as `<role>_cut_off` when retries run out: the model wrote more than the
    task allows (or the endpoint cut it), which a reader of the drop reasons should see as such."""


RETRYABLE = (
    openai.RateLimitError,
    openai.InternalServerError,
    openai.APITimeoutError,
    openai.APIConnectionError,
    Unparseable,
)
PERMANENT = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)
BAD_REQUEST = (openai.BadRequestError, openai.UnprocessableEntityError)


def server_message(exc: openai.APIStatusError) -> str:
    """The error message the server sent with a 4xx/5xx, as OpenAI-style endpoints shape it."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or exc.message or "").strip()[:300]


def describe_failure(exc: BaseException, base_url: str, timeout_s: float) -> str:
    """What went wrong with a call, in words a user can act on: a refused connection says so
    (the client reports it as a timeout), a status says its code and the server's message."""
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused at {base_url}"
        if isinstance(cause, OSError) and "Name or service not known" in str(cause):
            return f"cannot resolve the host of {base_url}"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, openai.APITimeoutError):
        return f"no answer within {timeout_s:g}s from {base_url}"
    if isinstance(exc, openai.APIConnectionError):
        return f"connection to {base_url} failed ({exc})"
    if isinstance(exc, openai.APIStatusError):
        said = server_message(exc)
        said = "" if said.startswith("Error code:") else f": {said}"  # the client's own words
        return f"HTTP {exc.status_code} from {base_url}{said}"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class StageUsage:
    calls: int = 0  # requests sent, retries included
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: Counter = field(default_factory=Counter)  # by exception kind
    failures: Counter = field(default_factory=Counter)

    def add_tokens(self, tokens: dict) -> None:
        """Count a completion's `usage` (an online answer or a batch line: the same dict)."""
        self.prompt_tokens += tokens.get("prompt_tokens") or 0
        self.completion_tokens += tokens.get("completion_tokens") or 0

    def as_dict(self) -> dict:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "retries": dict(sorted(self.retries.items())),
            "failures": dict(sorted(self.failures.items())),
        }


@dataclass
class CallResult:
    value: BaseModel | str
    content: str
    key: str
    cached: bool


@dataclass(frozen=True)
class Request:
    """One rendered chat request, as the cache keys it and a transport sends it."""

    task: str
    stage: str
    model: str
    messages: list[dict]
    seed: int
    params: dict
    key: str

    def body(self) -> dict:
        return {"model": self.model, "messages": self.messages, "seed": self.seed, **self.params}


class Transport(Protocol):
    """Another way to get answers into the cache before the online path is tried: batch mode
    (pipeline/batch.py) queues requests into Batch API jobs. `fetch` returns True if this run
    paid for the answer (submitted it), False if it only collected it; an answer it could not
    get is simply not in the cache, and the call goes online with its retries."""

    def bind(self, llm: LLM) -> None:
        """The client whose API (files, batches) and cache the transport uses."""

    async def fetch(self, llm: LLM, request: Request) -> bool: ...


def parse_output(content: str, schema: type[BaseModel] | None) -> BaseModel | str:
    if schema is None:
        text = content.strip()
        if not text:
            raise Unparseable("empty answer")
        return text
    try:
        # strict=False: a raw newline inside a string (small models under a grammar write them)
        # is read as one; what the answer says is then validated by the schema
        return schema.model_validate(json.loads(_FENCE.sub("", content.strip()), strict=False))
    except (json.JSONDecodeError, ValidationError) as e:
        raise Unparseable(f"{schema.__name__}: {str(e).splitlines()[0][:200]}") from None


# How a JSON task's output schema is sent (`model.structured_output`), by endpoint:
STRUCTURED = {
    "json_schema": "OpenAI / vLLM: response_format json_schema, strict, every field required",
    "json_object_schema": "llama.cpp server: response_format json_object with the schema "
    "(grammar-constrained; strings and lists bounded so a small model cannot run on)",
    "json_object": "JSON mode only (Ollama and others): valid JSON, the schema in the prompt",
    "none": "no response_format: the schema in the prompt only",
}
STRICT_DROP = ("minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum",
               "exclusiveMinimum", "exclusiveMaximum", "pattern", "format", "default")  # fmt: skip
BOUND_STRING, BOUND_ITEMS = 240, 8  # grammar bounds where the model schema sets none


def strict_schema(schema: dict, mode: str) -> dict:
    """A pydantic JSON schema in the form structured output accepts: every object closed
    (`additionalProperties: false`) with every property required; for OpenAI's strict mode the
    keywords it rejects removed (pydantic still validates them on the answer); for a grammar
    (llama.cpp) every string and list given an upper bound."""

    def fix(node):
        if isinstance(node, list):
            return [fix(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {
            k: fix(v) for k, v in node.items() if not (mode == "json_schema" and k in STRICT_DROP)
        }
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        if mode == "json_object_schema":
            if out.get("type") == "string":
                out.setdefault("maxLength", BOUND_STRING)
            if out.get("type") == "array":
                out.setdefault("maxItems", BOUND_ITEMS)
            lo, hi = out.get("minimum"), out.get("maximum")
            if out.get("type") == "integer" and lo is not None and hi is not None and hi - lo < 20:
                out["enum"] = list(range(int(lo), int(hi) + 1))  # a grammar keeps to an enum
        return out

    return fix(schema)


def response_format(output: type[BaseModel] | None, mode: str) -> dict | None:
    """The `response_format` a JSON task sends in `mode` (None for text tasks and mode none)."""
    if output is None or mode == "none":
        return None
    if mode == "json_object":
        return {"type": "json_object"}
    schema = strict_schema(output.model_json_schema(), mode)
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema",
            "json_schema": {"name": output.__name__, "schema": schema, "strict": True}}  # fmt: skip


def read_completion(body: bytes | dict | None) -> tuple[str, str | None, dict]:
    """Content, finish reason and token usage of a chat completion (its JSON body, or that body
    parsed). A truncated, garbled or non-completion body is transient, like a 5xx."""
    try:
        data = json.loads(body) if isinstance(body, bytes | str) else body
        choices = data["choices"]
        choice = choices[0] if choices else {}
        content = (choice.get("message") or {}).get("content") or ""
        tokens = data.get("usage") or {}
        if not isinstance(content, str) or not isinstance(tokens, dict):
            raise TypeError(type(content).__name__)
    except (ValueError, LookupError, TypeError, AttributeError) as e:
        raise Unparseable(f"response body is not a chat completion: {type(e).__name__}") from None
    if data.get("system_fingerprint") == SIMULATOR:
        # kept with the usage in the cache: the release says what answered, not the config
        tokens = {**tokens, "served_by": SIMULATOR}
    return content, choice.get("finish_reason"), tokens


def _retry_after(exc: BaseException | None) -> float | None:
    response = getattr(exc, "response", None)
    return ratelimit.retry_after(response.headers) if response is not None else None


def charged(tokens: dict, params: dict) -> int | None:
    """What a provider charged a request against its token limit: prompt + max_tokens."""
    prompt = tokens.get("prompt_tokens")
    if prompt is None:
        return None
    return prompt + int(params.get("max_tokens") or tokens.get("completion_tokens") or 0)


class LLM:
    def __init__(
        self,
        cfg: ModelConfig,
        cache: ResponseCache,
        *,
        concurrency: int | None = None,
        transport: Transport | None = None,
    ):
        self.cfg = cfg
        self.cache = cache
        self.transport = transport
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key.get_secret_value(),
            max_retries=0,  # tenacity owns retries, so they are counted and bounded in one place
            timeout=cfg.timeout_s,
            # openai's aiohttp transport: httpcore's per-request pool bookkeeping cost ~1 ms of
            # CPU per call here, the client's main limit (bench/throughput.py)
            http_client=openai.DefaultAioHttpClient(
                limits=httpx2.Limits(
                    max_connections=concurrency or cfg.concurrency,
                    max_keepalive_connections=concurrency or cfg.concurrency,
                )
            ),
        )
        self.semaphore = asyncio.Semaphore(concurrency or cfg.concurrency)
        self.limiter = Limiter(cfg.requests_per_minute, cfg.tokens_per_minute,
                               learn=cfg.rate_limits_from_headers)  # fmt: skip
        self._inflight: dict[str, asyncio.Future[CallResult]] = {}  # cache key -> pending call
        self.usage: dict[str, StageUsage] = defaultdict(StageUsage)
        progress.watch_usage(self.usage_dict)  # the live display reads the counters
        self._backoff = wait_random_exponential(
            multiplier=cfg.backoff_initial_s, max=cfg.backoff_max_s
        )
        if transport is not None:
            transport.bind(self)

    @property
    def batched(self) -> bool:
        """Calls go out in batch jobs: each round of dependent calls costs a job's turnaround,
        so a stage should ask what it can at once."""
        return self.transport is not None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = _retry_after(exc)
        return min(hinted, self.cfg.backoff_max_s) if hinted is not None else self._backoff(state)

    def params(self, prompt: Prompt) -> dict:
        """The request parameters of a prompt: its own (temperature, max_tokens) and, for a JSON
        task, the structured-output form of `model.structured_output` (in the cache key)."""
        fmt = _response_format(prompt.output, self.cfg.structured_output)
        return {**prompt.params, "response_format": fmt} if fmt else prompt.params

    def key_for(self, prompt: Prompt, model: str, messages: list[dict], seed: int) -> str:
        return cache_key(
            model=model,
            messages=messages,
            params=self.params(prompt),
            seed=seed,
            schema=prompt.output_schema(),
        )

    async def call(
        self,
        prompt: Prompt,
        *,
        stage: str,
        model: str,
        variables: dict,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> CallResult:
        """One model call; `max_tokens` overrides the prompt file's (e.g. sized from a word
        budget, so an answer over it is cut off and dropped, not kept half-written)."""
        seed = self.cfg.seed if seed is None else seed
        if max_tokens is not None:
            prompt = prompt.with_params(max_tokens=max_tokens)
        messages = prompt.render(**variables)
        key = self.key_for(prompt, model, messages, seed)
        usage = self.usage[stage]
        hit = self.cache.get(key)
        if hit is not None:
            content, _ = hit
            try:
                usage.cache_hits += 1
                return CallResult(parse_output(content, prompt.output), content, key, True)
            except Unparseable:
                self.cache.delete(key)  # a schema tightened since: ask again
                usage.cache_hits -= 1

        pending = self._inflight.get(key)
        if pending is not None:  # the same request is already on its way: pay for it once
            usage.cache_hits += 1
            return replace(await asyncio.shield(pending), cached=True)
        request = Request(prompt.task, stage, model, messages, seed, self.params(prompt), key)
        pending = asyncio.ensure_future(self._answer(prompt, request))
        self._inflight[key] = pending
        pending.add_done_callback(self._settled(key))
        return await asyncio.shield(pending)

    def _settled(self, key: str):
        def done(future: asyncio.Future) -> None:
            self._inflight.pop(key, None)
            # the callers may have been cancelled (a run stopping on its first error): the
            # outcome is theirs, but asyncio must not log it as "never retrieved"
            if not future.cancelled():
                future.exception()

        return done

    async def _answer(self, prompt: Prompt, req: Request) -> CallResult:
        """A cache miss: through the transport if there is one, else (or if it could not get
        the answer) online."""
        if self.transport is not None:
            paid = await self.transport.fetch(self, req)
            hit = self.cache.get(req.key)
            if hit is not None:
                try:
                    value = parse_output(hit[0], prompt.output)
                except Unparseable:
                    self.cache.delete(req.key)  # a bad transported answer: ask online
                else:
                    if not paid:  # collected from a job an interrupted run had paid for
                        self.usage[req.stage].cache_hits += 1
                    return CallResult(value, hit[0], req.key, cached=not paid)
        return await self._request(prompt, req)

    async def _request(self, prompt: Prompt, req: Request) -> CallResult:
        """Send one request with retries, parse it and cache the answer."""
        stage, model, messages, seed, key = req.stage, req.model, req.messages, req.seed, req.key
        usage = self.usage[stage]

        limiter = self.limiter

        def cost() -> int:  # counted only under a token limit: tiktoken costs ~0.3 ms a call
            return ratelimit.request_tokens(messages, req.params)

        async def attempt() -> CallResult:
            async with self.semaphore:
                estimate = await limiter.acquire(cost)
                usage.calls += 1
                try:
                    # the client's generic `post` for the chat-completions endpoint, returning
                    # the raw response: the same request and errors as `chat.completions.create`
                    # without its recursive transform of `messages` and typed build of the
                    # answer (~1.6 and ~0.6 ms of CPU per call; bench/throughput.py)
                    response = await self.client.post(
                        "/chat/completions",
                        cast_to=httpx2.Response,
                        body=req.body(),
                        options={"headers": {TASK_HEADER: prompt.task}},
                    )
                except openai.APIStatusError as e:
                    limiter.observe(e.response.headers, e.status_code)
                    too_long(e)
                    raise
                except BaseException:
                    limiter.observe(None)  # no answer: nothing learnt, but nobody waits on it
                    raise
                limiter.observe(response.headers, response.status_code)
            content, finish_reason, tokens = read_completion(response.content)
            usage.add_tokens(tokens)
            limiter.settle(estimate, charged(tokens, req.params))
            if finish_reason == "content_filter":
                # the provider refused: asking again gives the same refusal, so no retry
                raise LLMError("content_filter", f"{prompt.task}: answer withheld by the filter")
            if finish_reason == "length":
                # cut off at max_tokens: a text answer would parse but be incomplete; never cache it
                raise CutOff(
                    f"{prompt.task}: answer cut off at max_tokens="
                    f"{req.params.get('max_tokens', '?')} (finish_reason=length)"
                )
            value = parse_output(content, prompt.output)
            self.cache.put(
                key,
                task=prompt.task,
                model=model,
                request={"messages": messages, "params": req.params, "seed": seed},
                content=content,
                usage=tokens,
            )
            return CallResult(value, content, key, False)

        def too_long(e: openai.APIStatusError) -> None:
            wait = _retry_after(e)
            if wait is not None and wait > ratelimit.MAX_RETRY_AFTER_S:
                said = (f"{self.cfg.base_url} asked to wait {wait:,.0f}s before retrying (HTTP "
                        f"{e.status_code}), over the {ratelimit.MAX_RETRY_AFTER_S:g}s prb "
                        "waits: the call failed; rerun later to resume")  # fmt: skip
                progress.warn(said)
                raise LLMError("endpoint_error", said) from None

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception()
            usage.retries[type(exc).__name__] += 1
            log.debug("retrying %s (%s): %s", prompt.task, type(exc).__name__, exc)

        try:
            async for try_ in AsyncRetrying(
                retry=retry_if_exception_type(RETRYABLE),
                stop=stop_after_attempt(self.cfg.max_retries + 1),
                wait=self._wait,
                before_sleep=before_sleep,
                reraise=True,
            ):
                with try_:
                    return await attempt()
        except PERMANENT as e:
            usage.failures[type(e).__name__] += 1
            raise PermanentLLMError(
                "permanent",
                f"the endpoint refused the run (not retried): {type(e).__name__} from "
                f"{self.cfg.base_url} for model {model!r}"
                f" (HTTP {getattr(e, 'status_code', '?')}: {server_message(e)}); "
                "check the endpoint, model and key",
            ) from None
        except BAD_REQUEST as e:
            # this request only (too long a prompt, a value the server rejects): drop its
            # record with the server's words; the next record may well be fine
            usage.failures["bad_request"] += 1
            raise LLMError("bad_request", f"HTTP {e.status_code}: {server_message(e)}") from None
        except LLMError as e:
            usage.failures[e.kind] += 1
            raise
        except Unparseable as e:
            kind = "cut_off" if isinstance(e, CutOff) else "unparseable"
            usage.failures[kind] += 1
            raise LLMError(kind, str(e)) from None
        except RETRYABLE as e:
            usage.failures[type(e).__name__] += 1
            detail = describe_failure(e, self.cfg.base_url, self.cfg.timeout_s)
            raise LLMError("endpoint_error", detail) from None
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        # requests still in flight (a run stopped part way) are cancelled, not left to fail
        # against a closed client after the loop has moved on
        for pending in list(self._inflight.values()):
            pending.cancel()
        await self.client.close()

    def usage_dict(self) -> dict[str, dict]:
        return {stage: u.as_dict() for stage, u in sorted(self.usage.items())}


@contextlib.asynccontextmanager
async def session(cfg):
    """An LLM on a run config's endpoint and its response cache (`llm.cache`), both closed
    when the block ends: what every command that calls models outside a build opens."""
    cache = ResponseCache(cfg.cache_path)
    llm = LLM(cfg.model, cache)
    try:
        yield llm
    finally:
        await llm.aclose()
        cache.close()
