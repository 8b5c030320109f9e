"""The simulator's minimal OpenAI Batch API: `/v1/files` (upload, retrieve, content) and
`/v1/batches` (create, retrieve), enough for `prb build --mode batch` end to end.

A batch runs in the background as soon as it is created and answers every line with the same
deterministic `respond` as `/v1/chat/completions`. The prb task of a line is read from the prefix
of its `custom_id` (`task:key`), the batch counterpart of the online X-PRB-Task header. Files and
batches live in memory: they last as long as the simulator process, which is what a rerun needs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time

from fastapi import APIRouter, Form, UploadFile
from fastapi.responses import JSONResponse, Response

from pipeline.sim.completion import chat_completion, prompt_words
from pipeline.sim.dispatch import respond, schema_of
from pipeline.sim.messages import chat_problem
from pipeline.text import jsonl_lines

TERMINAL = {"completed", "failed", "expired", "cancelled"}


def _not_found(what: str, ident: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": f"no such {what}: {ident}", "type": "invalid_request_error"}},
        status_code=404,
    )


def answer_line(
    line: dict,
    models: tuple[str, ...],
    degrade_rate: float,
    leaky: float = 0.0,
    degenerate_rate: float = 0.0,
    judge: str = "sound",
) -> dict:
    """One Batch API output line for one input line."""
    custom_id = line.get("custom_id", "")
    body, problem = chat_problem(line.get("body") or {})  # content parts become text
    if line.get("url") != "/v1/chat/completions" or body.get("model") not in models:
        problem = "unknown url or model"
    if problem:
        return {
            "id": f"batch_req_{custom_id}",
            "custom_id": custom_id,
            "response": None,
            "error": {"code": "invalid_request", "message": problem},
        }
    task = custom_id.split(":", 1)[0] if ":" in custom_id else None
    content = respond(
        task,
        body.get("messages", []),
        body["model"],
        body.get("seed"),
        degrade_rate,
        leaky,
        degenerate_rate,
        judge=judge,
        schema=schema_of(body),
    )
    completion = chat_completion(
        body["model"],
        {"role": "assistant", "content": content},
        len(prompt_words(body)),
        len(content.split()),
        ident=f"chatcmpl-batch-{custom_id}",
    )
    return {
        "id": f"batch_req_{custom_id}",
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": custom_id, "body": completion},
        "error": None,
    }


class Service:
    """Files and batches in memory; a batch is answered in the background once created.
    `opts` is the server's SimOptions: its `stats` counter and answer options are shared."""

    def __init__(self, opts, models: tuple[str, ...]):
        self.opts, self.models = opts, models
        self.files: dict[str, dict] = {}  # id -> {"meta": FileObject dict, "data": bytes}
        self.batches: dict[str, dict] = {}
        self.ids = itertools.count(1)
        self.background: set[asyncio.Task] = set()  # referenced, so not collected early

    def new_file(self, data: bytes, filename: str, purpose: str) -> dict:
        fid = f"file-sim-{next(self.ids)}"
        meta = {
            "id": fid,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        self.files[fid] = {"meta": meta, "data": data}
        return meta

    def create(self, body: dict) -> dict:
        batch = {
            "id": f"batch-sim-{next(self.ids)}",
            "object": "batch",
            "endpoint": body.get("endpoint", "/v1/chat/completions"),
            "input_file_id": body["input_file_id"],
            "completion_window": body.get("completion_window", "24h"),
            "status": "validating",
            "created_at": int(time.time()),
            "metadata": body.get("metadata"),
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
        }
        self.batches[batch["id"]] = batch
        self.opts.stats["batches_created"] += 1
        job = asyncio.create_task(self.process(batch))
        self.background.add(job)
        job.add_done_callback(self.background.discard)
        return batch

    async def process(self, batch: dict) -> None:
        """Answer the batch's lines; an input the service cannot read fails the batch with
        its reason, as OpenAI's does (a task that died silently left it in progress forever,
        the client polling on)."""
        await asyncio.sleep(0)  # answer `create` first, as a real service does
        batch.update(status="in_progress", in_progress_at=int(time.time()))
        try:
            await self._answer(batch)
        except Exception as e:  # noqa: BLE001  (whatever it was, the batch says so)
            error = {"code": "invalid_request", "message": f"{type(e).__name__}: {e}"}
            batch.update(
                status="failed",
                failed_at=int(time.time()),
                errors={"object": "list", "data": [error]},
            )
            self.opts.stats["batches_failed"] += 1

    async def _answer(self, batch: dict) -> None:
        opts = self.opts
        data = self.files[batch["input_file_id"]]["data"]
        lines = []
        for number, text in enumerate(jsonl_lines(data.decode("utf-8")), 1):
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as e:
                raise ValueError(f"line {number} of the input file is not JSON ({e})") from None
        out, errors = [], []
        for i, line in enumerate(lines):
            result = answer_line(
                line,
                self.models,
                opts.degrade_rate,
                opts.leaky and opts.leaky_rate,
                opts.degenerate_rate,
                opts.judge,
            )
            (out if result["error"] is None else errors).append(json.dumps(result))
            opts.stats["batch_lines"] += 1
            if i % 200 == 199:
                await asyncio.sleep(0)  # keep the server responsive to polls
        if opts.latency_ms:
            await asyncio.sleep(opts.latency_ms / 1000)
        name = f"{batch['id']}_output.jsonl"
        batch["output_file_id"] = self.new_file(self._jsonl(out), name, "batch_output")["id"]
        if errors:
            name = f"{batch['id']}_error.jsonl"
            batch["error_file_id"] = self.new_file(self._jsonl(errors), name, "batch_output")["id"]
        batch["request_counts"] = {
            "total": len(lines),
            "completed": len(out),
            "failed": len(errors),
        }
        batch.update(status="completed", completed_at=int(time.time()))

    @staticmethod
    def _jsonl(lines: list[str]) -> bytes:
        return ("\n".join(lines) + "\n").encode()


def make_router(opts, models: tuple[str, ...]) -> APIRouter:
    """The Batch API's routes over one `Service`."""
    router = APIRouter(prefix="/v1")
    service = Service(opts, models)
    files, batches = service.files, service.batches

    @router.post("/files")
    async def upload(file: UploadFile, purpose: str = Form(...)):
        meta = service.new_file(await file.read(), file.filename or "upload.jsonl", purpose)
        opts.stats["files_uploaded"] += 1
        return meta

    @router.get("/files/{file_id}")
    async def file_meta(file_id: str):
        return files[file_id]["meta"] if file_id in files else _not_found("file", file_id)

    @router.get("/files/{file_id}/content")
    async def file_content(file_id: str):
        if file_id not in files:
            return _not_found("file", file_id)
        return Response(files[file_id]["data"], media_type="application/jsonl")

    @router.post("/batches")
    async def create(body: dict):
        fid = body.get("input_file_id")
        return service.create(body) if fid in files else _not_found("file", str(fid))

    @router.get("/batches/{batch_id}")
    async def retrieve(batch_id: str):
        return batches[batch_id] if batch_id in batches else _not_found("batch", batch_id)

    return router
