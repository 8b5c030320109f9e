"""The simulator as a rate-limited provider (`--rpm`, `--tpm`) and as a provider with automatic
prompt caching (`--cache-min-tokens`).

Rate limits: two buckets per server that refill continuously at the per-minute limit and hold
one second of it (providers enforce per-minute limits over shorter windows too). A request is
charged on arrival, its prompt tokens plus its `max_tokens` (OpenAI's count). Over a limit it
gets a 429 with `retry-after`/`retry-after-ms`, and every answer carries OpenAI's
`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers.

Prompt caching: as OpenAI's automatic caching, a prompt whose leading tokens (here: words, the
simulator's tokens) match an earlier prompt's is billed those tokens as cached, in blocks of
`cache_block` once at least `cache_min_tokens` match; `usage.prompt_tokens_details.cached_tokens`
reports them.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict

from fastapi.responses import JSONResponse

BURST_S = 1.0
PREFIXES_KEPT = 200_000  # block-prefix hashes remembered (an LRU, as a provider's cache evicts)


def duration(seconds: float) -> str:
    """OpenAI's reset format: "20ms", "1.5s", "2m3s"."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s" if minutes else f"{rest:.3g}s"


class ServerBucket:
    def __init__(self, per_minute: float):
        self.limit = per_minute
        self.rate = per_minute / 60
        self.capacity = max(1.0, self.rate * BURST_S)
        self.level = self.capacity
        self.t = time.monotonic()

    def refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.t) * self.rate)
        self.t = now

    def short_by(self, cost: float) -> float:
        """Seconds until `cost` can be paid; 0 if now (a request larger than the bucket passes
        when the bucket is full)."""
        return max(0.0, (min(cost, self.capacity) - self.level) / self.rate)

    def headers(self, dim: str) -> dict[str, str]:
        return {
            f"x-ratelimit-limit-{dim}": str(int(self.limit)),
            f"x-ratelimit-remaining-{dim}": str(max(0, int(self.level))),
            f"x-ratelimit-reset-{dim}": duration((self.capacity - self.level) / self.rate),
        }


class RateLimits:
    def __init__(self, rpm: float, tpm: float):
        self.requests = ServerBucket(rpm) if rpm else None
        self.tokens = ServerBucket(tpm) if tpm else None

    def __bool__(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def headers(self) -> dict[str, str]:
        out = {}
        for dim, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is not None:
                out.update(bucket.headers(dim))
        return out

    def admit(self, cost: int) -> JSONResponse | None:
        """Charge a request on arrival; a 429 if a limit is reached (nothing charged then)."""
        waits = {}
        for dim, bucket, need in (("requests", self.requests, 1), ("tokens", self.tokens, cost)):
            if bucket is not None:
                bucket.refill()
                waits[dim] = (bucket, need, bucket.short_by(need))
        over = {dim: w for dim, w in waits.items() if w[2] > 0}
        if over:
            dim, (bucket, need, wait) = max(over.items(), key=lambda kv: kv[1][2])
            message = (
                f"Rate limit reached for {dim} per min: Limit {int(bucket.limit)}, "
                f"Remaining {max(0, int(bucket.level))}, Requested {need}. Please try "
                f"again in {duration(wait)}."
            )
            return JSONResponse(
                {
                    "error": {
                        "message": message,
                        "type": dim,
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                status_code=429,
                headers={
                    **self.headers(),
                    "retry-after": str(math.ceil(wait)),
                    "retry-after-ms": str(math.ceil(wait * 1000)),
                },
            )
        for bucket, need, _ in waits.values():
            bucket.level -= need
        return None


class PromptCache:
    """Which leading blocks of a prompt an earlier prompt shared (words as tokens)."""

    def __init__(self, min_tokens: int, block: int):
        self.min_tokens, self.block = min_tokens, block
        self.seen: OrderedDict[str, None] = OrderedDict()

    def cached_tokens(self, model: str, words: list[str]) -> int:
        if not self.min_tokens or len(words) < self.min_tokens:
            return 0
        h = hashlib.sha256(model.encode())
        hit, n = 0, 0
        for end in range(self.block, len(words) + 1, self.block):
            h.update(" ".join(words[n:end]).encode() + b"\x00")
            n, key = end, h.copy().hexdigest()
            if key in self.seen:
                self.seen.move_to_end(key)
                hit = end
            else:
                self.seen[key] = None
                if len(self.seen) > PREFIXES_KEPT:
                    self.seen.popitem(last=False)
        return hit if hit >= self.min_tokens else 0
