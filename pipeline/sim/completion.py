"""The one `chat.completion` body the simulator answers with, online (server.py) and in a
Batch API output line (batches.py): usage counted in words, as the simulator counts tokens."""

from __future__ import annotations

from pipeline.sim import FINGERPRINT


def prompt_words(body: dict) -> list[str]:
    """A request's prompt, as the words the simulator counts as its tokens."""
    return [w for m in body.get("messages") or [] for w in (m.get("content") or "").split()]


def chat_completion(
    model: str,
    message: dict,
    prompt_tokens: int,
    completion_tokens: int,
    *,
    ident: str = "chatcmpl-sim",
    finish_reason: str = "stop",
    logprobs: dict | None = None,
) -> dict:
    choice = {"index": 0, "finish_reason": finish_reason, "message": message}
    return {
        "id": ident,
        "object": "chat.completion",
        "system_fingerprint": FINGERPRINT,
        "created": 0,
        "model": model,
        "choices": [choice | ({"logprobs": logprobs} if logprobs else {})],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
