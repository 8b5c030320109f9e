"""The model layer's settings, as the run config (pipeline/config.py) carries them: the
endpoint and its models (`model:`) and the Batch API (`batch:`), each validated where it is
defined (a provider prb has a backend for, a bundled local model, an http(s) URL). `Section`:
every config section's base (unknown keys refused)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from pipeline.llm.backends import BACKENDS
from pipeline.llm.local import MODELS


class Section(BaseModel):
    # inf and NaN pass every range check (`.inf` for a timeout overflowed asyncio's clock)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModelConfig(Section):
    # the protocol the endpoint speaks (pipeline/llm/backends): openai (OpenAI-compatible:
    # OpenAI, vLLM, llama.cpp, Ollama, the simulator) or anthropic (the Messages API)
    provider: str = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: SecretStr = SecretStr("sk-local-simulator")
    generator: str = "prb-sim-1"
    judge: str = "prb-sim-1"
    concurrency: int = Field(16, ge=1)
    max_retries: int = Field(5, ge=0)
    timeout_s: float = Field(60.0, gt=0)
    backoff_initial_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(20.0, ge=0)
    seed: int = 0
    # how JSON tasks send their schema (llm.STRUCTURED): json_schema (OpenAI, vLLM),
    # json_object_schema (llama.cpp server), json_object (JSON mode only), none
    structured_output: Literal["json_schema", "json_object_schema", "json_object", "none"] = (
        "json_schema"
    )
    weights_sha256: str | None = None  # a local model's weights file, recorded with the release
    # tokens a prompt and its answer may take; unset: the endpoint's figure where it gives one
    # (vLLM's max_model_len), else unknown and prompts go whole (pipeline/llm/window.py)
    context_window: int | None = Field(None, gt=0)
    # the key's rate limits (pipeline/llm/ratelimit.py); unset: learnt from the provider's
    # x-ratelimit-* headers unless rate_limits_from_headers is false
    requests_per_minute: float | None = Field(None, gt=0)
    tokens_per_minute: float | None = Field(None, gt=0)
    rate_limits_from_headers: bool = True
    # `prb demo --local` / `prb build --local`: which bundled real model to serve
    # (pipeline/llm/local.py: qwen2.5-1.5b, smollm2-135m) and its CPU threads (default: 1 to
    # generate, as two collapse when another process takes a core; up to 2 for prompts)
    local: str | None = None
    # offline: every call is answered from the response cache, and a request that failed when
    # the cache was made fails the same way (a recorded build replayed: tests/real_model/)
    replay: bool = False
    local_threads: int | None = Field(None, ge=1, le=256)  # generation
    local_batch_threads: int | None = Field(None, ge=1, le=256)  # prompt processing
    # sequences decoded together (llama.cpp's server, `make llama-server`); None: local.SLOTS
    local_slots: int | None = Field(None, ge=1, le=64)

    @field_validator("local")
    @classmethod
    def _local(cls, v: str | None) -> str | None:
        if v is not None and v not in MODELS:
            raise ValueError(f"unknown local model {v!r}: use one of {', '.join(MODELS)}")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str) -> str:
        """An http(s) URL with a host: anything else would be retried for a minute, then lost."""
        from urllib.parse import urlsplit

        try:
            url = urlsplit(v)
            url.port  # noqa: B018  (raises on a port out of range)
        except ValueError as e:
            raise ValueError(f"{v!r} is not a URL ({e})") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(
                f"{v!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1"
            )
        return v

    @field_validator("provider")
    @classmethod
    def _provider(cls, v: str) -> str:
        if v not in BACKENDS:
            raise ValueError(f"unknown provider {v!r}: use one of {', '.join(BACKENDS.names())}")
        return v


class BatchConfig(Section):
    """`prb build --mode batch`: the OpenAI Batch API (cheaper, answers within a day)."""

    poll_s: float = Field(30.0, gt=0)  # seconds between status checks
    max_requests: int = Field(50_000, ge=1)  # per batch file (the API's limit)
    completion_window: str = "24h"
