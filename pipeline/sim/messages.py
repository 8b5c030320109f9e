"""The simulator's Anthropic Messages API: a request translated to the chat-completions form its
answers and faults are made in, and the answer (or error) translated back, as Anthropic's API
shapes them. What prb's Anthropic backend (pipeline/llm/backends/anthropic.py) is tested on."""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse, Response

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
STOP = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}


def from_message(body: dict) -> dict:
    """A Messages API body as the chat-completions body the simulator answers."""
    messages = list(body.get("messages") or [])
    system = body.get("system")
    if isinstance(system, list):  # content blocks
        system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
    if system:
        messages.insert(0, {"role": "system", "content": system})
    out = {"model": body.get("model"), "messages": messages, "max_tokens": body.get("max_tokens")}
    if "temperature" in body:
        out["temperature"] = body["temperature"]
    fmt = (body.get("output_config") or {}).get("format")
    if fmt:
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": fmt.get("schema") or {}, "strict": True},
        }
    return out


def anthropic_error(status: int, message: str, headers=None) -> JSONResponse:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return JSONResponse(
        {"type": "error", "error": {"type": kind, "message": message}},
        status_code=status,
        headers=headers,
    )


def to_message(answer) -> Response:
    """A chat-completions answer (a dict, or a Response carrying one or an error) as the
    Messages API sends it; a spoiled body (a fault) goes out spoiled."""
    headers = None
    if isinstance(answer, Response):
        headers = {
            k: v
            for k, v in answer.headers.items()
            if k.lower() not in ("content-length", "content-type")
        }
        try:
            data = json.loads(answer.body)
        except ValueError:
            return answer
        if answer.status_code != 200:
            error = data.get("error") if isinstance(data, dict) else None
            message = error.get("message") if isinstance(error, dict) else str(data)
            return anthropic_error(answer.status_code, message or "error", headers)
        answer = data
    choice = answer["choices"][0]
    usage = answer.get("usage") or {}
    out = {
        "id": "msg_sim",
        "type": "message",
        "role": "assistant",
        "model": answer.get("model"),
        "content": [{"type": "text", "text": choice["message"].get("content") or ""}],
        "stop_reason": STOP.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
            "cache_read_input_tokens": (usage.get("prompt_tokens_details") or {}).get(
                "cached_tokens", 0
            ),
        },
        "system_fingerprint": answer.get("system_fingerprint"),  # the simulator's signature
    }
    return JSONResponse(out, headers=headers)


def text_of(content: object) -> str | None:
    """A message's content as text: a string, or a list of text parts (OpenAI's
    `{"type": "text", "text": ...}`, Anthropic's text blocks); None if it is neither."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = []
    for part in content:
        if (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            parts.append(part["text"])
        else:
            return None
    return "".join(parts)


def chat_problem(body: object) -> tuple[dict, str | None]:
    """A chat-completions body with every message's content as text, or what is wrong with it
    (in the words an OpenAI-compatible server would use) for a 400."""
    if not isinstance(body, dict):
        return {}, "The request body must be a JSON object."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return body, "'messages' must be a non-empty array of message objects."
    out = []
    for i, m in enumerate(messages):
        text = text_of(m.get("content")) if isinstance(m, dict) else None
        if text is None or not isinstance(m.get("role"), str):
            return body, (
                f"Invalid 'messages[{i}]': expected an object with a string 'role' and a "
                "'content' that is a string or an array of text parts."
            )
        out.append({**m, "content": text})
    if not isinstance(body.get("model"), str):
        return body, "'model' must be a string."
    return {**body, "messages": out}, None
