"""`prb reward-server`: one reward model (any `--rm` spec `prb eval` accepts, except pairwise
judges: a reward server scores one response) over HTTP, for RL engines to call.

    GET  /health  -> {"status": "ok", "rm": NAME, "context": MODE}
    POST /score   {"items": [{"question", "profile", "response"}, ...]}
                  -> {"rm": NAME, "scores": [float | null, ...], "errors": {index: why}}

At most `concurrency` batches are scored at once (the rest wait), at most `max_items` items a
batch (413 beyond); a malformed body is a 422 whose `error` names the field. LLM judges go
through pipeline/llm/: its retries, rate limits and the response cache (the same answer is never
paid for twice). An item the model could not score is null with its reason, never a made-up 0.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from pipeline.calls import LLMError, PermanentLLMError
from pipeline.eval.rewards import Query, SpecError, checked, user_context
from pipeline.records import RewardItem, ScoreRequest, ScoreResponse

MAX_ITEMS = 512


@dataclass
class Scorer:
    """A reward model built from a `--rm` spec against a run config's endpoint and cache."""

    spec: str
    cfg: object
    context: str = "profile"
    rm: object = field(init=False, default=None)

    def __post_init__(self):
        from pipeline.eval.models import parse_spec
        from pipeline.llm.cache import ResponseCache
        from pipeline.llm.client import LLM

        self.cache = ResponseCache(self.cfg.cache_path)
        self.llm = LLM(self.cfg.model, self.cache)
        try:
            self.rm = parse_spec(
                self.spec, llm=self.llm, judge_model=self.cfg.model.judge, context=self.context
            )
        except BaseException:
            self.cache.close()  # the LLM client has opened nothing yet
            raise
        if self.rm.pairwise:
            self.cache.close()
            raise SpecError(
                f"--rm {self.spec!r}: a pairwise judge compares two answers and a reward "
                "server scores one: use a pointwise kind (judge, hf, ...)"
            )
        if hasattr(self.rm, "stage"):
            self.rm.stage = f"reward-server {self.rm.name}"

    @classmethod
    def check(cls, spec: str, cfg, context: str = "profile") -> None:
        """Build and close one: a bad spec raises here, before any server starts."""
        asyncio.run(cls(spec, cfg, context).aclose())

    @property
    def name(self) -> str:
        return self.rm.name

    def _query(self, item: RewardItem) -> Query:
        row = {
            "profile": item.profile,
            "rubric_aspects": item.rubric_aspects,
            "narrative": item.narrative,
        }
        return Query(user_context(row, self.rm.context), item.question, item.response)

    async def score(self, items: list[RewardItem]) -> ScoreResponse:
        queries = [self._query(i) for i in items]
        try:
            scores, errors = checked(await self.rm.score_many(queries), len(queries))
            return ScoreResponse(rm=self.name, scores=scores, errors=errors)
        except PermanentLLMError:
            raise
        except LLMError:  # one bad item must not cost the batch: score them one by one
            pass
        scores, errors = [], {}
        for k, q in enumerate(queries):
            try:
                (one,), bad = checked(await self.rm.score_many([q]), 1)
            except PermanentLLMError:
                raise
            except LLMError as e:
                one, bad = None, {0: f"{e.kind}: {e.detail}"}
            scores.append(one)
            if bad:
                errors[k] = bad[0]
        return ScoreResponse(rm=self.name, scores=scores, errors=errors)

    async def aclose(self) -> None:
        self.rm.close()
        await self.llm.aclose()
        self.cache.close()


def make_app(make_scorer, concurrency: int = 4, max_items: int = MAX_ITEMS):
    """The FastAPI app; `make_scorer()` builds the Scorer inside the server's event loop.
    (The body models are imported at module level: FastAPI resolves these annotations by name.)"""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError

    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state["scorer"] = make_scorer()
        state["gate"] = asyncio.Semaphore(concurrency)
        try:
            yield
        finally:
            await state["scorer"].aclose()

    app = FastAPI(title="prb reward server", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        return JSONResponse(
            status_code=422,
            content={
                "error": f"{where}: {first['msg']}",
                "expected": '{"items": [{"question": str, "profile": str | [posts], '
                '"response": str}, ...]}',
            },
        )

    @app.get("/health")
    async def health():
        s = state["scorer"]
        return {"status": "ok", "rm": s.name, "context": s.rm.context}

    async def score(request):
        # the body is JSON whatever its Content-Type says (`curl -d` sends a form type, and
        # FastAPI's declared body refused it with 422)
        try:
            body = ScoreRequest.model_validate_json(await request.body())
        except ValidationError as e:
            raise RequestValidationError(
                [{**x, "loc": ("body", *x["loc"])} for x in e.errors()]
            ) from None
        if len(body.items) > max_items:
            raise HTTPException(
                413,
                f"{len(body.items)} items in one request (max {max_items}): send smaller batches",
            )
        async with state["gate"]:
            try:
                return await state["scorer"].score(body.items)
            except PermanentLLMError as e:  # the reward model's endpoint refuses: say so
                raise HTTPException(502, f"the reward model's endpoint refused: {e}") from None

    # the annotation as an object: FastAPI reads string ones in the module, where fastapi
    # (imported here, lazily) is not
    score.__annotations__ = {"request": Request}
    app.post("/score", response_model=ScoreResponse)(score)
    return app


def serve(
    spec: str,
    cfg,
    *,
    host: str,
    port: int,
    context: str = "profile",
    concurrency: int = 4,
    max_items: int = MAX_ITEMS,
    announce=None,
) -> None:
    from pipeline import serving

    app = make_app(lambda: Scorer(spec, cfg, context), concurrency, max_items)
    serving.serve(app, host, port, announce, name="the reward server")


class Background:
    """A reward server on a free local port in a thread of this process (for `prb eval rl`
    and the tests): `with Background(spec, cfg) as url: ...`."""

    def __init__(self, spec: str, cfg, context: str = "profile", concurrency: int = 4):
        import socket

        import uvicorn

        Scorer.check(spec, cfg, context)  # a bad spec fails here, not in the thread
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        app = make_app(lambda: Scorer(spec, cfg, context), concurrency)
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )

    def __enter__(self) -> str:
        import threading
        import time

        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the reward server on port {self.port} did not start")
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
