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

from pipeline.sim import FINGERPRINT
from pipeline.sim.dispatch import respond, schema_of
from pipeline.sim.messages import chat_problem

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
    prompt_tokens = sum(len((m.get("content") or "").split()) for m in body.get("messages", []))
    completion_tokens = len(content.split())
    completion = {
        "id": f"chatcmpl-batch-{custom_id}",
        "object": "chat.completion",
        "system_fingerprint": FINGERPRINT,
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return {
        "id": f"batch_req_{custom_id}",
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": custom_id, "body": completion},
        "error": None,
    }


def make_router(opts, models: tuple[str, ...]) -> APIRouter:
    """`opts` is the server's SimOptions: its `stats` counter and `degrade_rate` are shared."""
    router = APIRouter(prefix="/v1")
    files: dict[str, dict] = {}  # id -> {"meta": FileObject dict, "data": bytes}
    batches: dict[str, dict] = {}
    ids = itertools.count(1)
    background: set[asyncio.Task] = set()  # keep references so tasks are not collected early

    def new_file(data: bytes, filename: str, purpose: str) -> dict:
        fid = f"file-sim-{next(ids)}"
        meta = {
            "id": fid,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        files[fid] = {"meta": meta, "data": data}
        return meta

    @router.post("/files")
    async def upload(file: UploadFile, purpose: str = Form(...)):
        meta = new_file(await file.read(), file.filename or "upload.jsonl", purpose)
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

    async def process(batch: dict) -> None:
        await asyncio.sleep(0)  # answer `create` first, as a real service does
        batch.update(status="in_progress", in_progress_at=int(time.time()))
        lines = [json.loads(x) for x in files[batch["input_file_id"]]["data"].splitlines() if x]
        out, errors = [], []
        for i, line in enumerate(lines):
            result = answer_line(
                line,
                models,
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
        batch["output_file_id"] = new_file(
            ("\n".join(out) + "\n").encode(), f"{batch['id']}_output.jsonl", "batch_output"
        )["id"]
        if errors:
            batch["error_file_id"] = new_file(
                ("\n".join(errors) + "\n").encode(), f"{batch['id']}_error.jsonl", "batch_output"
            )["id"]
        batch["request_counts"] = {
            "total": len(lines),
            "completed": len(out),
            "failed": len(errors),
        }
        batch.update(status="completed", completed_at=int(time.time()))

    @router.post("/batches")
    async def create(body: dict):
        fid = body.get("input_file_id")
        if fid not in files:
            return _not_found("file", str(fid))
        batch = {
            "id": f"batch-sim-{next(ids)}",
            "object": "batch",
            "endpoint": body.get("endpoint", "/v1/chat/completions"),
            "input_file_id": fid,
            "completion_window": body.get("completion_window", "24h"),
            "status": "validating",
            "created_at": int(time.time()),
            "metadata": body.get("metadata"),
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
        }
        batches[batch["id"]] = batch
        opts.stats["batches_created"] += 1
        job = asyncio.create_task(process(batch))
        background.add(job)
        job.add_done_callback(background.discard)
        return batch

    @router.get("/batches/{batch_id}")
    async def retrieve(batch_id: str):
        return batches[batch_id] if batch_id in batches else _not_found("batch", batch_id)

    return router
