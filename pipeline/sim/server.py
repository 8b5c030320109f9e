"""An OpenAI-compatible HTTP server on loopback: `/v1/models` and `/v1/chat/completions`.

Answers come from `responder` (deterministic per request). Faults are drawn per attempt from a
seeded generator, so a retried request can succeed, as with a real flaky endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field, fields

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from pipeline.serving import free_port, subprocess_server  # noqa: F401 (re-exported)
from pipeline.sim import batches
from pipeline.sim import faults as extra_faults
from pipeline.sim.completion import chat_completion, prompt_words
from pipeline.sim.dispatch import respond, schema_of
from pipeline.sim.limits import PromptCache, RateLimits
from pipeline.sim.messages import anthropic_error, chat_problem, from_message, to_message

MODELS = ("prb-sim-1",)
JUDGES = ("sound", "random", "always_a")  # --judge: how the pairwise judges answer


@dataclass
class SimOptions:
    latency_ms: float = 0.0
    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_malformed: float = 0.0
    rate_slow: float = 0.0
    slow_s: float = 30.0
    degrade_rate: float = 0.0
    degenerate_rate: float = 0.0  # rejected answers that repeat one line (the quality floor)
    leaky: bool = False  # rejected answers shorter, hedged, in a register of their own
    leaky_rate: float = 1.0  # with leaky: the share of rejected answers written so (by hash)
    judge: str = "sound"  # the pairwise judges: sound, random or always_a (a weak judge)
    # answers that carry reasoning as open models emit it: half `<think>…</think>` before the
    # content (vLLM / llama.cpp raw), half in a `reasoning_content` field (by hash)
    reasoning_rate: float = 0.0
    seed: int = 0
    fault_tasks: str = ""  # comma-separated prompt tasks the faults hit (X-PRB-Task); "" = all
    retry_after: str = "0"  # the 429s' Retry-After header; "" sends none
    # extra faults, see faults.py
    rate_502: float = 0.0
    rate_503: float = 0.0
    rate_reset: float = 0.0
    rate_truncated: float = 0.0
    rate_non_json: float = 0.0
    rate_wrong_schema: float = 0.0
    rate_content_filter: float = 0.0
    require_key: str = ""  # answer 401 unless this key is sent
    context_limit: int = 0  # prompt tokens (counted as words) over this get OpenAI's 400; 0 = none
    rpm: float = 0.0  # requests per minute; over it a 429 with OpenAI's headers (limits.py)
    tpm: float = 0.0  # tokens per minute (prompt + max_tokens, charged on arrival)
    cache_min_tokens: int = 0  # automatic prompt caching from this many shared leading tokens
    cache_block: int = 128  # ... in blocks of this many (OpenAI: 1024 and 128); 0 min = off
    attempts: Counter = field(default_factory=Counter)  # request digest -> times seen
    stats: Counter = field(default_factory=Counter)

    def any_faults(self) -> bool:
        return any(
            getattr(self, f.name) for f in fields(self) if f.name.startswith("rate_")
        ) or bool(self.require_key)


NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def response_format_problem(fmt: object) -> str | None:
    """What is wrong with a request's `response_format`, in OpenAI's words, or None: the
    simulator refuses what OpenAI would, so the tests prove the request's shape."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        return "Invalid type for 'response_format': expected an object."
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":  # llama.cpp also takes a `schema` here
        bad = "schema" in fmt and not isinstance(fmt["schema"], dict)
        return "Invalid type for 'response_format.schema': expected an object." if bad else None
    if kind != "json_schema":
        return (
            f"Invalid value: {kind!r}. Supported values are: 'json_object', 'json_schema', "
            "and 'text'."
        )
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        return "Missing required parameter: 'response_format.json_schema.schema'."
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        return "Invalid 'response_format.json_schema.name': must match ^[a-zA-Z0-9_-]{1,64}$."
    if spec.get("strict"):
        return _strict_problem(spec["schema"], name, ())
    return None


def _strict_problem(node: object, name: str, where: tuple) -> str | None:
    if isinstance(node, list):
        return next((p for i, n in enumerate(node) if (p := _strict_problem(n, name, where))), None)
    if not isinstance(node, dict):
        return None
    if node.get("type") == "object" and "properties" in node:
        context = f"In context={where}"
        if node.get("additionalProperties") is not False:
            return (
                f"Invalid schema for response_format '{name}': {context}, "
                "'additionalProperties' is required to be supplied and to be false."
            )
        missing = [k for k in node["properties"] if k not in (node.get("required") or [])]
        if missing:
            return (
                f"Invalid schema for response_format '{name}': {context}, 'required' is "
                "required to be supplied and to be an array including every key in "
                f"properties. Missing {missing[0]!r}."
            )
    for key, value in node.items():
        if (problem := _strict_problem(value, name, (*where, key))) is not None:
            return problem
    return None


def bad_request(message: str, param: str | None = None) -> JSONResponse:
    """A 400 in OpenAI's shape (naming the parameter at fault, when there is one)."""
    error = {"message": message, "type": "invalid_request_error", "code": None}
    return JSONResponse({"error": error | ({"param": param} if param else {})}, status_code=400)


class Simulator:
    """What every protocol's route answers with: a valid chat request becomes an answer or
    the fault the options draw for it. `complete` takes the OpenAI body (the Messages API's
    translated to it); the routers below only speak their protocol."""

    def __init__(self, opts: SimOptions):
        self.opts = opts
        self.limits = RateLimits(opts.rpm, opts.tpm)
        self.prompt_cache = PromptCache(opts.cache_min_tokens, opts.cache_block)

    async def complete(self, body: dict, request: Request):
        body, problem = chat_problem(body)  # every valid request of the protocol is answered
        if problem is not None:
            return bad_request(problem)
        return await self.answer(body, request)

    async def answer(self, body: dict, request: Request):
        opts = self.opts
        opts.stats["requests"] += 1
        words = prompt_words(body)
        if self.limits:  # charged on arrival, as a provider does
            cost = len(words) + int(body.get("max_tokens") or 0)
            if (refused := self.limits.admit(cost)) is not None:
                opts.stats["rate_limited"] += 1
                return refused
        if opts.latency_ms:
            await asyncio.sleep(opts.latency_ms / 1000)
        faults, roll = self.draw(body, request)
        extra = extra_faults.draw(opts, faults) if roll < 1.0 else None
        if (early := extra_faults.before_answer(opts, extra, request)) is not None:
            return early
        edges = [opts.rate_429, opts.rate_500, opts.rate_malformed, opts.rate_slow]
        cum = [sum(edges[: i + 1]) for i in range(len(edges))]
        if (refused := self.refusal(body, words, roll, cum)) is not None:
            return refused
        content = respond(
            request.headers.get("x-prb-task"),
            body.get("messages", []),
            body["model"],
            body.get("seed"),
            opts.degrade_rate,
            opts.leaky and opts.leaky_rate,
            opts.degenerate_rate,
            judge=opts.judge,
            schema=schema_of(body),
        )
        finish_reason = "stop"
        if roll < cum[2]:
            # cut off mid-answer, as a real model hitting max_tokens: broken JSON for planner and
            # judge tasks, a truncated text for generation (finish_reason says so)
            opts.stats["fault_malformed"] += 1
            content = content[: max(1, len(content) // 2)] + " <<garbled"
            finish_reason = "length"
        elif roll < cum[3]:
            opts.stats["fault_slow"] += 1
            await asyncio.sleep(opts.slow_s)
        opts.stats["answered"] += 1
        payload = self.completion(body, words, content, finish_reason)
        answer = extra_faults.after_answer(extra, payload)
        if self.limits and isinstance(answer, dict):
            return JSONResponse(answer, headers=self.limits.headers())
        return answer

    def draw(self, body: dict, request: Request) -> tuple[random.Random | None, float]:
        """This attempt's faults: drawn per request and attempt, not from one shared stream, so
        the same request meets the same faults whatever else is in flight, and a retry draws
        anew. A roll of 1.0: no fault."""
        opts = self.opts
        if not opts.any_faults():  # a fault-free simulator spends nothing on drawing faults
            return None, 1.0
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        opts.attempts[digest] += 1
        faults = random.Random(f"{opts.seed}:{digest}:{opts.attempts[digest]}")
        roll = faults.random()
        hit = {t for t in opts.fault_tasks.split(",") if t}
        if hit and request.headers.get("x-prb-task") not in hit:
            roll = 1.0  # faults restricted to other tasks
        return faults, roll

    def refusal(self, body: dict, words: list[str], roll: float, cum: list[float]):
        """The error this request gets before any answer (a drawn 429 or 500, a bad
        response_format, an unknown model, a prompt over the context), or None."""
        opts = self.opts
        if roll < cum[0]:
            opts.stats["fault_429"] += 1
            return JSONResponse(
                {"error": {"message": "rate limited", "type": "rate_limit"}},
                status_code=429,
                headers={"Retry-After": opts.retry_after} if opts.retry_after else None,
            )
        if roll < cum[1]:
            opts.stats["fault_500"] += 1
            return JSONResponse({"error": {"message": "simulated failure"}}, status_code=500)
        if (problem := response_format_problem(body.get("response_format"))) is not None:
            opts.stats["bad_response_format"] += 1
            return bad_request(problem, "response_format")
        if body.get("model") not in MODELS:
            error = {
                "message": f"model {body.get('model')!r} not found",
                "type": "invalid_request_error",
                "code": "model_not_found",
            }
            return JSONResponse({"error": error}, status_code=404)
        if opts.context_limit and len(words) > opts.context_limit:
            opts.stats["fault_400"] += 1
            error = {
                "message": f"This model's maximum context length is {opts.context_limit}"
                f" tokens. However, your messages resulted in {len(words)} tokens. "
                "Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            return JSONResponse({"error": error}, status_code=400)
        return None

    def completion(self, body: dict, words: list[str], content: str, finish_reason: str) -> dict:
        """The answer's chat.completion: logprobs, reasoning and prompt-cache figures where the
        request and the options ask for them."""
        opts = self.opts
        completion_tokens = len(content.split())
        message = {"role": "assistant", "content": content}
        logprobs = None
        if body.get("logprobs"):
            top_k = int(body.get("top_logprobs") or 1)
            message["content"], logprobs = with_logprobs(content, top_k)
            completion_tokens = 1
        if opts.reasoning_rate and finish_reason == "stop":
            message = with_reasoning(message, opts, body)
            completion_tokens += len(THOUGHT.split())
        payload = chat_completion(
            body["model"],
            message,
            len(words),
            completion_tokens,
            finish_reason=finish_reason,
            logprobs=logprobs,
        )
        if opts.cache_min_tokens:
            cached = self.prompt_cache.cached_tokens(body["model"], words)
            payload["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
            opts.stats["cached_tokens"] += cached
        return payload


async def json_body(request: Request) -> tuple[dict, str | None]:
    try:
        return await request.json(), None
    except ValueError:  # a body that is not JSON (or not UTF-8)
        return {}, "We could not parse the JSON body of your request."


def openai_router(sim: Simulator) -> APIRouter:
    """OpenAI's chat completions and model list."""
    router = APIRouter(prefix="/v1")

    @router.get("/models")
    async def models():
        limit = sim.opts.context_limit  # vLLM's field for the context window, when enforced
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "owned_by": "prb"}
                | ({"max_model_len": limit} if limit else {})
                for m in MODELS
            ],
        }

    @router.post("/chat/completions")
    async def chat(request: Request):
        body, problem = await json_body(request)
        return await sim.complete(body, request) if problem is None else bad_request(problem)

    return router


def anthropic_router(sim: Simulator) -> APIRouter:
    """Anthropic's Messages API over the same answers and faults (messages.py translates the
    request and the answer)."""
    router = APIRouter(prefix="/v1")

    @router.post("/messages")
    async def messages(request: Request):
        body, problem = await json_body(request)
        if problem is None and not isinstance(body, dict):
            problem = "The request body must be a JSON object."
        if problem is not None:
            return anthropic_error(400, problem)
        if request.headers.get("anthropic-version") is None:
            return anthropic_error(400, "missing anthropic-version header")
        return to_message(await sim.complete(from_message(body), request))

    return router


def create_app(opts: SimOptions) -> FastAPI:
    app = FastAPI(title="prb simulator")
    sim = Simulator(opts)
    app.include_router(openai_router(sim))
    app.include_router(anthropic_router(sim))
    app.include_router(batches.make_router(opts, MODELS))  # /v1/files, /v1/batches

    @app.get("/stats")
    async def stats():
        return dict(opts.stats)

    @app.get("/health")
    async def health():
        return PlainTextResponse("ok")

    return app


# what leaks if reasoning reached parsing or the floor: not JSON, a repeated line, an echo
THOUGHT = (
    "The user wants an answer. {not json}\nLet me think.\nLet me think.\nLet me think.\n"
    "Answer: placeholder"
)


def with_reasoning(message: dict, opts: SimOptions, body: dict) -> dict:
    """`message` with planted reasoning, for `opts.reasoning_rate` of requests (by hash)."""
    digest = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    if draw >= opts.reasoning_rate:
        return message
    opts.stats["reasoning"] += 1
    if digest[8] % 2:
        return message | {"content": f"<think>\n{THOUGHT}\n</think>\n\n{message['content']}"}
    return message | {"reasoning_content": THOUGHT}


def with_logprobs(content: str, k: int) -> tuple[str, dict]:
    """A one-token answer and its logprobs, as OpenAI and llama.cpp give them: a yes/no judge's
    `{"p_yes": p}` becomes "yes" or "no" with both words' logprobs among the alternatives;
    any other answer its first word, certain."""
    try:
        p = float(json.loads(content)["p_yes"])
    except (ValueError, TypeError, KeyError):
        first = (content.split() or [""])[0]
        top = [{"token": first, "logprob": 0.0}]
    else:
        p = min(max(p, 1e-6), 1 - 1e-6)
        top = sorted(
            [{"token": "yes", "logprob": math.log(p)}, {"token": "no", "logprob": math.log(1 - p)}],
            key=lambda t: -t["logprob"],
        )
        top += [{"token": " Yes", "logprob": -12.0}, {"token": "The", "logprob": -13.0}]
    top = top[: max(1, k)]
    entry = {
        "token": top[0]["token"],
        "logprob": top[0]["logprob"],
        "bytes": None,
        "top_logprobs": [t | {"bytes": None} for t in top],
    }
    return top[0]["token"], {"content": [entry], "refusal": None}


OPTION_FLAGS = {
    "latency_ms": "--latency-ms",
    "rate_429": "--rate-429",
    "rate_500": "--rate-500",
    "rate_malformed": "--rate-malformed",
    "rate_slow": "--rate-slow",
    "slow_s": "--slow-s",
    "degrade_rate": "--degrade-rate",
    "degenerate_rate": "--degenerate-rate",
    "leaky": "--leaky",
    "leaky_rate": "--leaky-rate",
    "judge": "--judge",
    "reasoning_rate": "--reasoning-rate",
    "fault_tasks": "--fault-tasks",
    "retry_after": "--retry-after",
    **{name: "--" + name.replace("_", "-") for name in extra_faults.EXTRA_RATES},
    "require_key": "--require-key",
    "context_limit": "--context-limit",
    "rpm": "--rpm",
    "tpm": "--tpm",
    "cache_min_tokens": "--cache-min-tokens",
    "cache_block": "--cache-block",
    "seed": "--seed",
}


def serve(
    port: int, opts: SimOptions, host: str = "127.0.0.1", announce=None, name: str | None = None
) -> None:
    from pipeline import serving

    serving.serve(create_app(opts), host, port, announce, name)


@contextlib.contextmanager
def running(port: int | None = None, startup_timeout: float = 30.0, **options):
    """Run the simulator in a subprocess on a free loopback port; yields its base URL."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "pipeline.sim", "--port", str(port)]
    for name, value in options.items():
        if isinstance(value, bool):  # a switch: present or not
            cmd += [OPTION_FLAGS[name]] if value else []
        else:
            cmd += [OPTION_FLAGS[name], str(value)]
    base = f"http://127.0.0.1:{port}"
    with subprocess_server(cmd, f"{base}/health", "the simulator", startup_timeout=startup_timeout):
        yield f"{base}/v1"


def port_number(text: str) -> int:
    """An option's port: 0-65535, 0 for any free one (argparse says which option in one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535; 0: any free port)")
    return value


def amount(kind: type, at_most: float = math.inf):
    """An option's number of `kind`: finite, not negative and at most `at_most` (a rate, a
    latency, a count)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
        if value > at_most:
            raise argparse.ArgumentTypeError(f"{text!r}: a share of requests, 0 to {at_most:g}")
        return value

    return parse


def is_share(name: str) -> bool:
    """A SimOptions field that is a share of requests (0-1): the rates but rpm, tpm."""
    return name.startswith("rate_") or name.endswith("_rate")


def arguments() -> argparse.ArgumentParser:
    """`prb sim-server`'s options (argparse: shared with `python -m pipeline.sim`)."""
    ap = argparse.ArgumentParser(prog="prb sim-server", description=__doc__)
    ap.add_argument("--port", type=port_number, default=8000)
    defaults = SimOptions()
    for name, flag in OPTION_FLAGS.items():
        default = getattr(defaults, name)
        if isinstance(default, bool):
            ap.add_argument(flag, action="store_true")
        elif isinstance(default, int | float):
            limit = 1.0 if is_share(name) else math.inf
            ap.add_argument(flag, type=amount(type(default), limit), default=default)
        else:
            ap.add_argument(flag, type=type(default), default=default)
    return ap


def main(argv: list[str] | None = None, name: str | None = None) -> None:
    """The simulator's command line; `name`: a server a user started, which says it stopped
    (a build's child stays quiet)."""
    ap = arguments()
    args = ap.parse_args(argv)
    args.port = args.port or free_port()  # 0: a free port, and the announcement names it
    opts = SimOptions(**{name: getattr(args, name) for name in OPTION_FLAGS})
    if opts.judge not in JUDGES:
        ap.error(f"--judge {opts.judge!r}: use one of {', '.join(JUDGES)}")
    from pipeline.errors import PortInUse

    try:
        serve(
            args.port,
            opts,
            announce=lambda: print(f"prb simulator on http://127.0.0.1:{args.port}/v1", flush=True),
            name=name,
        )
    except PortInUse as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
