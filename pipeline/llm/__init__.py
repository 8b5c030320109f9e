"""The one model call path. `client` (LLM, session): cache, in-flight dedupe, retries, rate
limits, usage; `types` (a leaf: what checks and stages import); `backends/` (one file per
provider protocol); `structured` (output schemas); `batch`, `cache`, `ratelimit`, `prompts`,
`cost`, `local` (the bundled real model).

Names are re-exported lazily, so `pipeline.calls` or `pipeline.llm.prompts` can be imported
without loading the client and its HTTP libraries.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "LLM": "client",
    "session": "client",
    "Transport": "client",
    "retryable": "client",
    "CallResult": "types",
    "CutOff": "types",
    "EndpointError": "types",
    "LLMError": "types",
    "PermanentLLMError": "types",
    "Reply": "types",
    "Request": "types",
    "StageUsage": "types",
    "TASK_HEADER": "types",
    "Unparseable": "types",
    "STRUCTURED": "structured",
    "parse_output": "structured",
    "response_format": "structured",
    "strict_schema": "structured",
    "read_completion": "backends.openai",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline.llm' has no attribute {name!r}")
    return getattr(import_module(f"pipeline.llm.{_EXPORTS[name]}"), name)
