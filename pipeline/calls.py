"""What the model call path hands around: requests, answers, usage and failures. A leaf (no
prb import but `errors`), so checks and stages can name these types without importing the
client, and backends can raise them without importing each other."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel

from pipeline.errors import PrbError

TASK_HEADER = "X-PRB-Task"  # lets the simulator (or a proxy) see which prompt a call uses
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_reasoning(content: str) -> tuple[str, str]:
    """(reasoning, answer) of a completion whose content carries reasoning where open models
    served by vLLM or llama.cpp put it: `<think>…</think>` blocks before the answer, or the text
    before a lone `</think>` (templates that open the block in the prompt). An unclosed leading
    `<think>` (cut off while thinking) leaves no answer. A `<think>` after the answer has begun
    is the answer's own text ("in HTML you might write <think> as a made-up tag"), kept."""
    if THINK_OPEN not in content and THINK_CLOSE not in content:
        return "", content
    reasoning = []
    head, sep, rest = content.partition(THINK_CLOSE)
    if sep and THINK_OPEN not in head:  # opened by the template: all before it is reasoning
        reasoning.append(head)
        content = rest
    content = content.lstrip()
    while content.startswith(THINK_OPEN):
        thought, closed, content = content[len(THINK_OPEN) :].partition(THINK_CLOSE)
        reasoning.append(thought)
        content = content.lstrip() if closed else ""
    return "\n".join(r.strip() for r in reasoning).strip(), content.strip()


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
    """An answer stopped at `max_tokens`: retried like any unparseable answer, and dropped as
    `<role>_cut_off` when retries run out."""


class EndpointError(Exception):
    """A request the endpoint did not answer, as a backend classifies it:

    - `transient`: 429, 5xx, timeouts, refused or reset connections (retried);
    - `permanent`: bad key, no access, unknown model (the run stops);
    - `bad_request`: this request only (e.g. over the context length; its record is dropped).

    `headers` are the rate-limit headers in OpenAI's names (`x-ratelimit-*`, `retry-after`),
    whatever the provider called them, for the limiter."""

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        cause: str = "",
    ):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.status = status
        self.headers = headers or {}
        self.cause = cause or kind  # the client's exception name, for retry counters


@dataclass
class Reply:
    """An answer as every backend returns it. `finish_reason`: stop, length (cut off at
    max_tokens) or content_filter. `tokens`: prompt_tokens, completion_tokens (and
    prompt_tokens_details.cached_tokens, served_by where known), the cache's usage record."""

    status: int
    headers: dict[str, str]
    content: str
    finish_reason: str | None
    tokens: dict
    # the first generated token's alternatives [{token, logprob}], when the request asked
    # for logprobs and the endpoint gave them
    top_logprobs: list[dict] | None = None


@dataclass
class CallResult:
    value: BaseModel | str
    content: str
    key: str
    cached: bool


@dataclass(frozen=True)
class Request:
    """One rendered chat request, as the cache keys it and a backend sends it."""

    task: str
    stage: str
    model: str
    messages: list[dict]
    seed: int
    params: dict
    key: str

    def body(self) -> dict:
        return {"model": self.model, "messages": self.messages, "seed": self.seed, **self.params}


@dataclass
class StageUsage:
    calls: int = 0  # requests sent, retries included
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens: thinking that never reaches parsing
    # of prompt_tokens: those the server took from its prompt cache instead of evaluating
    # (`prompt_tokens_details.cached_tokens`, where the endpoint says)
    cached_prompt_tokens: int = 0
    retries: Counter = field(default_factory=Counter)  # by exception kind
    failures: Counter = field(default_factory=Counter)
    # seconds with at least one request of the stage at the endpoint: a stage's wall time
    # less this is time the model sat idle waiting for prb
    busy_s: float = 0.0
    _in_flight: int = field(default=0, repr=False)
    _since: float = field(default=0.0, repr=False)

    def add_tokens(self, tokens: dict) -> None:
        """Count a completion's `usage` (an online answer or a batch line: the same dict)."""
        self.prompt_tokens += tokens.get("prompt_tokens") or 0
        self.completion_tokens += tokens.get("completion_tokens") or 0
        self.reasoning_tokens += tokens.get("reasoning_tokens") or 0
        details = tokens.get("prompt_tokens_details")
        if isinstance(details, dict):
            self.cached_prompt_tokens += details.get("cached_tokens") or 0

    def sent(self) -> None:
        """A request went to the endpoint (pair each with `answered`)."""
        if not self._in_flight:
            self._since = time.monotonic()
        self._in_flight += 1

    def answered(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self.busy_s += time.monotonic() - self._since

    def as_dict(self) -> dict:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            **({"cached_prompt_tokens": c} if (c := self.cached_prompt_tokens) else {}),
            "completion_tokens": self.completion_tokens,
            **({"reasoning_tokens": self.reasoning_tokens} if self.reasoning_tokens else {}),
            "retries": dict(sorted(self.retries.items())),
            "failures": dict(sorted(self.failures.items())),
            "busy_s": round(self.busy_s, 3),
        }
