"""Scoring speed and memory of an HF reward model through `prb eval`'s adapter (issue 28): a
random-weight Llama-style sequence classifier, built here and saved in bf16 (no download),
scores synthetic (question, answer) pairs of ~`--words` words in bf16 and in fp32. For each
dtype, in its own process: pairs per second, peak memory (GPU: torch's peak allocated; CPU: the
process's peak RSS), the weights' footprint, and on a GPU the share of its dense roofline the
forward pass reaches (2 x parameters x tokens FLOPs, attention left out).

    .venv/bin/python bench/eval_gpu.py                      # CPU: the tiny shape
    .venv/bin/python bench/eval_gpu.py --shape 1b --pairs 512   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {  # Llama 3.2 1B and Llama 3.1 8B shapes; tiny for CPU
    "tiny": dict(
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=8192,
    ),
    "1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
    ),
    "8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
    ),
}
PEAK_TFLOPS = {"bf16": 989.0, "fp32": 67.0}  # H100/H200 SXM dense; other GPUs: pass --peak


def make_model(shape: str, folder: Path, vocab: list[str]) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]"
    )
    config = transformers.LlamaConfig(
        **SHAPES[shape], num_labels=1, pad_token_id=0, max_position_embeddings=4096
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = transformers.LlamaForSequenceClassification(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)


def one(folder: str, dtype: str, pairs: int, words: int, budget: int) -> dict:
    import torch

    from pipeline.eval.hf import HFRewardModel
    from pipeline.eval.rewards import Query

    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(2, 4000)]
    text = lambda n: " ".join(rng.choice(vocab) for _ in range(n))  # noqa: E731
    queries = [Query("", text(20), text(words)) for _ in range(2 * pairs)]
    rm = HFRewardModel("hf", "none", {}, path=folder, dtype=dtype, max_batch_tokens=budget)
    params = sum(p.numel() for p in rm.net.parameters())
    embed = rm.net.get_input_embeddings().weight.numel()
    rm.score_batch(queries[:8])  # warm-up
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    rm.score_batch(queries)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tokens = sum(rm._length(q) for q in queries)
    out = {
        "dtype": dtype,
        "pairs_per_s": pairs / seconds,
        "seconds": seconds,
        "tokens": tokens,
        "weights_gb": rm.net.get_memory_footprint() / 1e9,
        "device": rm.device,
        "tflops": 2 * (params - embed) * tokens / seconds / 1e12,
    }
    if gpu:
        out["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    else:
        out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=SHAPES, default="tiny")
    ap.add_argument("--pairs", type=int, default=128)
    ap.add_argument("--words", type=int, default=300)
    ap.add_argument("--max-batch-tokens", type=int, default=16384)
    ap.add_argument("--peak", type=float, help="the GPU's dense bf16 TFLOP/s, if not an H100/H200")
    ap.add_argument("--one", nargs=2, metavar=("FOLDER", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.pairs, args.words, args.max_batch_tokens)))
        return
    folder = Path(tempfile.mkdtemp(prefix="prb-eval-gpu-"))
    make_model(args.shape, folder, ["[PAD]", "[UNK]", *(f"w{i}" for i in range(2, 4000))])
    print(
        f"shape {args.shape}, {args.pairs} pairs of ~{args.words}-word answers, "
        f"max_batch_tokens {args.max_batch_tokens}"
    )
    found = {}
    for dtype in ("bf16", "fp32"):
        cmd = [
            sys.executable,
            __file__,
            "--one",
            str(folder),
            dtype,
            "--pairs",
            str(args.pairs),
            "--words",
            str(args.words),
            "--max-batch-tokens",
            str(args.max_batch_tokens),
        ]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            print(f"{dtype}: failed: {run.stderr.strip().splitlines()[-1]}")
            continue
        r = found[dtype] = json.loads(run.stdout.strip().splitlines()[-1])
        peak = {"bf16": args.peak or PEAK_TFLOPS["bf16"], "fp32": PEAK_TFLOPS["fp32"]}[dtype]
        roof = f"{r['tflops'] / peak:.1%} of {peak:g} TFLOP/s" if r["device"] != "cpu" else "n/a"
        print(
            f"{dtype}: {r['pairs_per_s']:.1f} pairs/s on {r['device']} ({r['tokens']} tokens "
            f"in {r['seconds']:.1f} s, {r['tflops']:.2f} TFLOP/s, roofline {roof}); peak "
            f"{r['peak_gb']:.2f} GB, weights {r['weights_gb']:.3f} GB"
        )
    if len(found) == 2:
        b, f = found["bf16"], found["fp32"]
        print(
            f"bf16 / fp32: peak memory {b['peak_gb'] / f['peak_gb']:.2f}, weights "
            f"{b['weights_gb'] / f['weights_gb']:.2f}, speed "
            f"{b['pairs_per_s'] / f['pairs_per_s']:.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
