"""A real-model build against any OpenAI-compatible server (issue 47 item 5): vLLM on a GPU,
llama.cpp's own server, a provider. The recipe's config (`configs/real-fit.yaml` by default)
pointed at the server, from an empty response cache, then what it made and at what rate:
released pairs, wall time, pairs/hour, calls, prompt and generated tokens per second, the share
of the model stages' wall time the server was busy, and, given the model's size and the GPU's
dense peak, the share of the forward-pass rate the build reached (2 x parameters x tokens FLOPs
over the model stages' busy seconds; attention left out).

    # on the GPU machine: vllm serve Qwen/Qwen2.5-Coder-1.5B-Instruct (configs/vllm.yaml)
    .venv/bin/python bench/remote_build.py --base-url http://127.0.0.1:8000/v1 \\
        --model Qwen/Qwen2.5-Coder-1.5B-Instruct --params-b 1.54 --peak-tflops 989 \\
        --concurrency 32
    .venv/bin/python bench/remote_build.py --simulator      # the machinery, against prb's own

The key, if the server wants one, comes from PRB_API_KEY (never printed or written).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import yaml
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent


def config(folder: Path, args, url: str, model: str) -> Path:
    """The recipe pointed at `url` and `model`: no local model, the server's structured output."""
    data = yaml.safe_load((REPO / args.config).read_text())
    data["outputs_dir"] = str(folder / "outputs")
    m = data.setdefault("model", {})
    m.pop("local", None)
    m.pop("local_slots", None)
    m.update(
        base_url=url,
        generator=model,
        judge=model,
        concurrency=args.concurrency,
        structured_output=args.structured_output,
    )
    if args.per_category:
        data.setdefault("personas", {})["per_category"] = args.per_category
    if args.simulator:
        data["simulated"] = True
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    return folder / "config.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", help="the server's OpenAI-compatible /v1 URL")
    ap.add_argument("--model", help="the model name the server serves")
    ap.add_argument("--simulator", action="store_true", help="prb's simulator instead")
    ap.add_argument("--config", default="configs/real-fit.yaml", help="the recipe to build")
    ap.add_argument("--per-category", type=int, help="users per category (default: the recipe's)")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    ap.add_argument(
        "--structured-output",
        default="json_schema",
        help="json_schema (vLLM, OpenAI), json_object_schema (llama.cpp)",
    )
    ap.add_argument("--params-b", type=float, help="the model's parameters, in billions")
    ap.add_argument("--peak-tflops", type=float, help="the GPU's dense peak (H100 SXM bf16: 989)")
    args = ap.parse_args()
    if not args.simulator and not (args.base_url and args.model):
        ap.error("give --base-url and --model, or --simulator")
    with tempfile.TemporaryDirectory(prefix="prb-remote-build-") as tmp:
        isolate(Path(tmp))
        if args.simulator:
            from pipeline.sim.server import running

            serving = running()
        else:
            serving = nullcontext(args.base_url)
        with prefect_server(), serving as url:
            cfg = config(Path(tmp), args, url, args.model or "prb-sim-1")
            prb = str(Path(sys.executable).with_name("prb"))
            started = time.monotonic()
            done = subprocess.run([prb, "build", "--config", str(cfg)], text=True)
            wall = time.monotonic() - started
            if done.returncode:
                sys.exit(f"the build exited {done.returncode}")
            run_id = yaml.safe_load(cfg.read_text())["run_id"]
            run_dir = Path(tmp) / "outputs" / run_id
            stats = json.loads((run_dir / "run_stats.json").read_text())
            funnel = json.loads((run_dir / "funnel.json").read_text())
    report(args, wall, stats, funnel)


def report(args, wall: float, stats: dict, funnel: list[dict]) -> None:
    released = funnel[-1]["count"]
    usage = stats["usage"].values()
    calls = sum(u["calls"] for u in usage)
    prompt = sum(u["prompt_tokens"] for u in usage)
    cached = sum(u.get("cached_prompt_tokens", 0) for u in usage)
    generated = sum(u["completion_tokens"] for u in usage)
    model_stages = [s for s in stats["stages"].values() if "model_busy_s" in s]
    busy = sum(s["model_busy_s"] for s in model_stages)
    model_wall = sum(s["wall_s"] for s in model_stages)
    print(
        f"{args.config} on {args.model or 'prb-sim-1'}: {released} pairs released in "
        f"{wall / 60:.1f} min = {released / wall * 3600:.1f} pairs/h; {calls} calls "
        f"({calls / max(1, released):.1f} per released pair), concurrency {args.concurrency}"
    )
    print(
        f"tokens: prompt {prompt:,} ({cached / prompt if prompt else 0:.0%} from the server's "
        f"cache), generated {generated:,}; per second of build: prompt {prompt / wall:,.0f}, "
        f"generated {generated / wall:,.1f}; the server busy {busy / max(model_wall, 1e-9):.0%} "
        f"of the model stages' {model_wall:,.0f} s"
    )
    if args.params_b and args.peak_tflops and busy:
        flops = 2 * args.params_b * 1e9 * (prompt - cached + generated)
        share = flops / busy / (args.peak_tflops * 1e12)
        print(
            f"forward passes: {flops / 1e12:,.1f} TFLOP in {busy:,.0f} s busy = "
            f"{flops / busy / 1e12:,.2f} TFLOP/s, {share:.2%} of the {args.peak_tflops:g} "
            f"TFLOP/s peak"
        )


if __name__ == "__main__":
    main()
