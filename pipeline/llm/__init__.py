"""The one model call path. `client` (LLM, session): cache, in-flight dedupe, retries, rate
limits, usage; `backends/` (one file per provider protocol); `structured` (output schemas);
`settings` (the config's `model:` and `batch:`); `batch`, `cache`, `ratelimit`, `prompts`,
`local` (the bundled real model). The call types (requests, replies, errors, usage) are
`pipeline.calls`, below this package: the checks import them too.

Names are re-exported lazily, so `pipeline.calls` or `pipeline.llm.prompts` can be imported
without loading the client and its HTTP libraries.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "LLM": "pipeline.llm.client",
    "session": "pipeline.llm.client",
    "Transport": "pipeline.llm.client",
    "retryable": "pipeline.llm.client",
    "CallResult": "pipeline.calls",
    "CutOff": "pipeline.calls",
    "EndpointError": "pipeline.calls",
    "LLMError": "pipeline.calls",
    "PermanentLLMError": "pipeline.calls",
    "Reply": "pipeline.calls",
    "Request": "pipeline.calls",
    "StageUsage": "pipeline.calls",
    "TASK_HEADER": "pipeline.calls",
    "Unparseable": "pipeline.calls",
    "STRUCTURED": "pipeline.llm.structured",
    "parse_output": "pipeline.llm.structured",
    "response_format": "pipeline.llm.structured",
    "strict_schema": "pipeline.llm.structured",
    "read_completion": "pipeline.llm.backends.openai",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline.llm' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
