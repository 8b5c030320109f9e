"""Model providers, one file each behind the `Backend` seam (base.py); `model.provider` in the
config names one. Adding a provider: a module here with its Backend class, and its line below
(or an entry point in the `prb.backends` group from another package)."""

from __future__ import annotations

from pipeline.llm.backends.base import Backend
from pipeline.registry import Registry

BACKENDS: Registry[type[Backend]] = Registry(
    "backends",
    Backend,
    classes=True,
    builtin={
        "openai": "pipeline.llm.backends.openai:OpenAIBackend",
        "anthropic": "pipeline.llm.backends.anthropic:AnthropicBackend",
    },
)
