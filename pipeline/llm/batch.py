"""`prb build --mode batch`: model calls go through the OpenAI Batch API instead of one request
each, and their answers land in the response cache, so the stages run unchanged.

`BatchTransport` is a transport of the call path's `LLM` (`LLM(..., transport=...)`): a cache
miss is not sent at once but queued while the stage creates its calls, and once no new call
has arrived for `QUIET_S` the queue is written to a Batch API JSONL file, uploaded (`files.create`),
submitted (`batches.create`) and recorded in `<run_dir>/batches.jsonl` BEFORE any polling, so a
rerun after a crash collects the recorded batch instead of paying for it twice. Collected
answers are written into the response cache, where the waiting call reads its answer. A line
the batch could not answer (error line, expired batch, unparseable output) is not in the cache,
so the call falls back to the online path with its retries: nothing is dropped for being
batched.
A stage with dependent calls (content plan, then chosen/rejected) simply makes one batch per
round. Remaining window: a crash between `batches.create` returning and the record being
written loses that batch id (one line of I/O; the run then submits it again).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from pipeline import progress
from pipeline.calls import PermanentLLMError, Request, Unparseable
from pipeline.llm.backends.openai import read_completion
from pipeline.llm.client import LLM
from pipeline.llm.settings import BatchConfig
from pipeline.records import BatchJob
from pipeline.store import StageFile, atomic_write
from pipeline.text import jsonl_lines

log = logging.getLogger("prb.batch")

QUIET_S = 0.2  # no new call for this long: the stage has queued all it can, submit
TERMINAL = {"completed", "failed", "expired", "cancelled"}
ENDPOINT = "/v1/chat/completions"


class BatchTransport:
    def __init__(self, cfg: BatchConfig, run_dir: Path):
        self.batch_cfg = cfg
        self.run_dir = Path(run_dir)
        self.jobs = StageFile(self.run_dir, "batches", BatchJob)
        self._queue: dict[str, tuple[str, dict, asyncio.Future]] = {}  # custom_id -> ...
        self._worker: asyncio.Task | None = None
        self._paid: set[str] = set()  # custom ids this run submitted (not merely collected)
        self.llm: LLM | None = None  # the client whose files/batches API and cache it uses

    def bind(self, llm: LLM) -> None:
        self.llm = llm

    async def fetch(self, llm: LLM, request: Request) -> bool:
        """A cache miss (LLM.call has checked the cache and merged identical calls in flight):
        ask through a batch; the answer, if the batch gave one, is then in the cache."""
        cid = f"{request.task}:{request.key}"
        await self._via_batch(cid, request.stage, request.body())
        return cid in self._paid  # counted as a call when submitted (_submit)

    async def _via_batch(self, custom_id: str, stage: str, body: dict) -> None:
        if custom_id not in self._queue:  # the same request twice shares one batch line
            future = asyncio.get_running_loop().create_future()
            self._queue[custom_id] = (stage, body, future)
        future = self._queue[custom_id][2]
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._queue:
            seen = -1
            while seen != len(self._queue):  # wait until the stage stops adding calls
                seen = len(self._queue)
                await asyncio.sleep(QUIET_S)
            todo, self._queue = self._queue, {}
            try:
                await self._run_batches(todo)
            except Exception as e:
                err = e
                if not isinstance(e, PermanentLLMError):
                    err = PermanentLLMError(
                        "batch",
                        f"{type(e).__name__} from the Batch API at {self.llm.cfg.base_url}: {e}",
                    )
                for _, _, future in todo.values():
                    if not future.done():
                        future.set_exception(err)
                return
            for _, _, future in todo.values():
                if not future.done():
                    future.set_result(None)

    async def _run_batches(self, todo: dict[str, tuple[str, dict, asyncio.Future]]) -> None:
        # batches submitted earlier (by a run that crashed while polling) are collected first
        await asyncio.gather(*(self._collect(job, {}) for job in self.open_jobs()))
        todo = {
            cid: v for cid, v in todo.items() if self.llm.cache.get(cid.split(":", 1)[1]) is None
        }
        ids = sorted(todo)
        size = self.batch_cfg.max_requests
        jobs = []
        for start in range(0, len(ids), size):
            chunk = {cid: todo[cid] for cid in ids[start : start + size]}
            jobs.append((await self._submit(chunk), chunk))
        await asyncio.gather(*(self._collect(job, chunk) for job, chunk in jobs))

    def open_jobs(self) -> list[BatchJob]:
        """Batches recorded as submitted and not yet collected."""
        submitted: dict[str, BatchJob] = {}
        for job in self.jobs.read():
            if job.state == "submitted":
                submitted[job.batch_id] = job
            else:
                submitted.pop(job.batch_id, None)
        return list(submitted.values())

    async def _submit(self, chunk: dict[str, tuple[str, dict, asyncio.Future]]) -> BatchJob:
        folder = self.run_dir / "batches"
        n = len(list(folder.glob("*.jsonl"))) if folder.exists() else 0
        path = folder / f"input-{n:05d}.jsonl"
        with atomic_write(path) as f:
            for cid, (_, body, _) in chunk.items():
                line = {"custom_id": cid, "method": "POST", "url": ENDPOINT, "body": body}
                f.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
        uploaded = await self.llm.backend.client.files.create(
            file=(path.name, path.read_bytes()), purpose="batch"
        )
        batch = await self.llm.backend.client.batches.create(
            input_file_id=uploaded.id,
            endpoint=ENDPOINT,
            completion_window=self.batch_cfg.completion_window,
        )
        job = BatchJob(
            batch_id=batch.id,
            input_file_id=uploaded.id,
            input_path=str(path.relative_to(self.run_dir)),
            requests=len(chunk),
            state="submitted",
        )
        with self.jobs.appender() as append:  # on disk before the first poll
            append(job)
        for cid, (stage, _, _) in chunk.items():
            self.llm.usage[stage].calls += 1
            self._paid.add(cid)
        log.info("submitted batch %s (%d requests)", batch.id, len(chunk))
        return job

    async def _collect(self, job: BatchJob, chunk: dict) -> None:
        """Poll until the batch ends, then write every answered line into the cache."""
        while True:
            batch = await self.llm.backend.client.batches.retrieve(job.batch_id)
            progress.batch(job.batch_id, batch.status, batch.request_counts)
            if batch.status in TERMINAL:
                break
            await asyncio.sleep(self.batch_cfg.poll_s)
        bodies = {}
        with open(self.run_dir / job.input_path, encoding="utf-8") as f:
            for line in f:
                req = json.loads(line)
                bodies[req["custom_id"]] = req["body"]
        answered = 0
        if batch.output_file_id:
            text = (await self.llm.backend.client.files.content(batch.output_file_id)).text
            for line in jsonl_lines(text):
                answered += self.store_line(json.loads(line), bodies, chunk)
        log.info("collected batch %s: %s, %d answered", job.batch_id, batch.status, answered)
        if batch.status != "completed":  # its calls go online; say why the batch did not answer
            said = [e.message for e in (batch.errors.data if batch.errors else None) or []]
            log.warning(
                "batch %s %s%s: its %d calls go online",
                job.batch_id,
                batch.status,
                f" ({'; '.join(str(m) for m in said[:3])})" if said else "",
                len(chunk) - answered,
            )
        with self.jobs.appender() as append:
            append(job.model_copy(update={"state": "collected", "status": batch.status}))

    def store_line(self, out: dict, bodies: dict[str, dict], chunk: dict) -> int:
        """Write one output line's answer into the cache: 1 if stored, 0 if the line has no
        usable answer (its call then falls back to the online path)."""
        cid = out.get("custom_id", "")
        response = out.get("response") or {}
        if cid not in bodies or response.get("status_code") != 200:
            return 0  # its call falls back to the online path
        try:
            content, finish_reason, usage = read_completion(response.get("body"))
        except Unparseable:
            return 0
        if cid in chunk:  # tokens count for the run that paid for them
            self.llm.usage[chunk[cid][0]].add_tokens(usage)
        if finish_reason in ("length", "content_filter"):
            return 0  # never cached: the online path retries a cut-off answer, drops a refusal
        task, key = cid.split(":", 1)
        body = dict(bodies[cid])
        model, messages, seed = body.pop("model"), body.pop("messages"), body.pop("seed")
        self.llm.cache.put(
            key,
            task=task,
            model=model,
            request={"messages": messages, "params": body, "seed": seed},
            content=content,
            usage={**usage, "batch": True},  # cost.py prices batch tokens at the batch discount
        )
        return 1
