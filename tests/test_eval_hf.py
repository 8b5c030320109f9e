"""The Hugging Face reward-model adapters on tiny, randomly initialised models built here (no
downloads): a BERT sequence classifier, a Llama base model with a value head, and the BERT
classifier read as a pairwise ranker, each with a word-level tokenizer in a local folder."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch", reason="the hf extra is not installed: pip install '.[hf]'")
transformers = pytest.importorskip(
    "transformers", reason="the hf extra is not installed: pip install '.[hf]'"
)

from test_eval import length_rows, persona_rows, write_release  # noqa: E402

from pipeline.eval.models import parse_spec  # noqa: E402
from pipeline.eval.rewards import Query  # noqa: E402


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    rows = length_rows() + persona_rows(4)
    words = sorted(
        {
            w
            for r in rows
            for k in ("question", "chosen", "rejected")
            for w in r[k].lower().replace(".", " ").replace(",", " ").split()
        }
    )
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        num_labels=1,
    )
    model = transformers.BertForSequenceClassification(config)
    path = tmp_path_factory.mktemp("tiny-rm")
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path, rows


def test_hf_adapter_scores_in_batches_like_one_at_a_time(tiny_rm, tmp_path):
    from pipeline.eval.evaluate import evaluate

    path, rows = tiny_rm
    batched = parse_spec(
        f"hf:{path},batch_size=8,device=cpu", llm=None, judge_model="", context="none"
    )
    single = parse_spec(f"hf:{path},batch_size=1", llm=None, judge_model="", context="none")
    assert (
        batched.device == "cpu" and batched.name == f"hf(batch_size=8,device=cpu,path={path})/none"
    )
    release = write_release(tmp_path / "release", rows)
    _, [a, b] = asyncio.run(evaluate(release, [batched, single], n_resamples=100))
    for x, y in zip(a["pairs"], b["pairs"], strict=True):  # padding must not change a score
        assert x["score_chosen"] == pytest.approx(y["score_chosen"], abs=1e-4)
        assert x["score_rejected"] == pytest.approx(y["score_rejected"], abs=1e-4)
    assert len({round(p["score_chosen"], 5) for p in a["pairs"]}) > 1  # the model is really read

    # the same number as a plain forward pass of that model on (question, answer)
    r = rows[0]
    enc = single.tokenizer(r["question"], r["chosen"], return_tensors="pt")
    with torch.inference_mode():
        ref = single.net(**enc).logits[0, 0].item()
    got = asyncio.run(single.score("", r["question"], r["chosen"]))
    assert (
        got
        == pytest.approx(ref, abs=1e-5)
        == pytest.approx(a["pairs"][0]["score_chosen"], abs=1e-4)
    )
    assert asyncio.run(batched.rank("", "q", ["a", "b"])) == asyncio.run(
        batched.score_many([Query("", "q", "a"), Query("", "q", "b")])
    )


def test_hf_adapter_names_a_missing_model(tmp_path):
    from pipeline.eval.rewards import SpecError

    with pytest.raises(SpecError, match="cannot load a sequence-classifier model"):
        parse_spec(f"hf:{tmp_path / 'nothing'}", llm=None, judge_model="", context="none")


def test_a_long_profile_is_cut_never_the_answer(tiny_rm, tmp_path):
    """~3,000-word profiles on a model with a 128-token window: the old adapter cut the prompt
    from the right, so the answer went first and every pair tied (or the positions overflowed).
    Now the context is cut by whole posts, the answers always go in, and the cut is counted."""
    from pipeline.eval.evaluate import evaluate

    path, rows = tiny_rm
    long = [
        dict(
            r,
            profile=[
                {
                    "id": f"{r['id']}-p{k}",
                    "category": r["category"],
                    "text": "I write long posts about my week and my garden. " * 6,
                }
                for k in range(50)
            ],
        )
        for r in rows
    ]
    assert len(" ".join(p["text"] for p in long[0]["profile"]).split()) > 2500
    rm = parse_spec(f"hf:{path},batch_size=4", llm=None, judge_model="", context="profile")
    scored, results = asyncio.run(evaluate(write_release(tmp_path / "rel", long), [rm], 50))
    pairs = results[0]["pairs"]
    assert not [p for p in pairs if p["error"]]
    ties = [p for p in pairs if p["score_chosen"] == p["score_rejected"]]
    assert not ties  # the answers, which differ, are always in what the model reads
    t = results[0]["truncation"]
    assert t["contexts"] == 2 * len(long) and t["cut"] == 2 * len(long) and t["too_long"] == 0
    assert t["tokens_cut"] > 2 * len(long) * 100
    for q in (Query(r["profile"][0]["text"] * 3, r["question"], r["chosen"]) for r in long[:3]):
        fitted = rm.fit(q)
        assert fitted.response == q.response and fitted.question == q.question
        assert rm._length(fitted) <= rm.max_length
    # an answer that cannot fit with its question alone is an error row, not a score
    huge = [dict(long[0], id="huge", chosen="word " * 400)]
    _, results = asyncio.run(evaluate(write_release(tmp_path / "huge", huge), [rm], 50))
    assert results[0]["pairs"][0]["error"] and results[0]["metrics"]["errors"] == 1


def spec(text: str, context: str = "none"):
    return parse_spec(text, llm=None, judge_model="", context=context)


@pytest.fixture(scope="module")
def tiny_value_head(tiny_rm, tmp_path_factory):
    """A Llama-style base model (no head of its own) and `value_head.safetensors` beside it."""
    from safetensors.torch import save_file

    bert_path, rows = tiny_rm
    tokenizer = transformers.AutoTokenizer.from_pretrained(bert_path)
    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny-value-head")
    transformers.LlamaModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    head = {"weight": torch.randn(1, 16), "bias": torch.randn(1)}
    save_file(head, str(path / "value_head.safetensors"))
    return path, rows


def test_a_value_head_reward_model_scores_the_last_real_token(tiny_value_head):
    from safetensors.torch import load_file

    path, rows = tiny_value_head
    rm = spec(f"hf:{path},batch_size=8")  # found by its value_head.safetensors
    assert rm.arch == "value-head"
    queries = [Query("", r["question"], r[k]) for r in rows[:6] for k in ("chosen", "rejected")]
    batched = rm.score_batch(queries)  # padded to the longest
    head = load_file(str(path / "value_head.safetensors"))
    base = transformers.AutoModel.from_pretrained(path)
    for q, got in zip(queries, batched, strict=True):
        enc = rm.tokenizer(q.question, q.response, return_tensors="pt")  # alone: no padding
        with torch.inference_mode():
            last = base(**{k: enc[k] for k in ("input_ids", "attention_mask")}).last_hidden_state
        ref = (last[0, -1] @ head["weight"][0] + head["bias"][0]).item()
        assert got == pytest.approx(ref, abs=1e-4)
    assert len({round(x, 4) for x in batched}) > 1


def test_a_pairwise_ranker_reads_both_answers_in_both_orders(tiny_rm, tmp_path):
    from pipeline.eval.evaluate import evaluate

    path, rows = tiny_rm
    ranker = spec(f"hf-pair:{path}")
    assert ranker.pairwise and ranker.name == f"hf-pair(path={path})/none"
    r = rows[0]
    for a, b in ((r["chosen"], r["rejected"]), (r["rejected"], r["chosen"])):
        enc = ranker.tokenizer(
            r["question"], f"Answer A: {a}\n\nAnswer B: {b}", return_tensors="pt"
        )
        with torch.inference_mode():
            logit = ranker.net(**enc).logits[0, 0].item()
        assert asyncio.run(ranker.prefer("", r["question"], a, b)) == ("A" if logit > 0 else "B")
    wins = asyncio.run(ranker.rank("", r["question"], [r["chosen"], r["rejected"]]))
    assert sum(wins) == 2  # two ordered pairs, one win (or two halves) each
    _, [result] = asyncio.run(evaluate(write_release(tmp_path / "rel", rows), [ranker], 50))
    assert result["metrics"]["n"] == len(rows) and not result["metrics"]["errors"]


def test_dtype_device_map_and_token_batches(tiny_rm):
    path, rows = tiny_rm
    fp32 = spec(f"hf:{path},batch_size=1,dtype=fp32")
    bf16 = spec(f"hf:{path},dtype=bf16")
    placed = spec(f"hf:{path},device_map=cpu,max_batch_tokens=64")
    assert fp32.net.dtype == torch.float32 and bf16.net.dtype == torch.bfloat16
    assert spec(f"hf:{path}").net.dtype == torch.float32  # auto: as the model was saved
    queries = [Query("", r["question"], r[k]) for r in rows for k in ("chosen", "rejected")]
    ref = fp32.score_batch(queries)
    for got in (bf16.score_batch(queries), placed.score_batch(queries)):
        assert got == pytest.approx(ref, abs=0.05)
    assert placed.score_batch(queries) == pytest.approx(ref, abs=1e-5)
    batches = placed.batches(queries)
    assert sorted(i for b in batches for i in b) == list(range(len(queries)))
    for b in batches:  # padded to its longest, each batch fits the budget (or is one query)
        assert len(b) == 1 or max(placed._length(queries[i]) for i in b) * len(b) <= 64
    from pipeline.eval.rewards import SpecError

    with pytest.raises(SpecError, match="dtype=fp64: use one of auto, bf16, fp16, fp32"):
        spec(f"hf:{path},dtype=fp64")
    with pytest.raises(SpecError, match="unknown arch=ranker"):
        spec(f"hf:{path},arch=ranker")


# --- the published protocol ----------------------------------------------------------------------

CHAT = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}"


@pytest.fixture(scope="module")
def tiny_chat_rms(tiny_rm, tmp_path_factory):
    """Llama-style sequence classifiers with a chat template, as the public scorer expects:
    one with a single reward logit, one with two labels (scored by the last one's softmax)."""
    bert_path, rows = tiny_rm
    tokenizer = transformers.AutoTokenizer.from_pretrained(bert_path)
    tokenizer.chat_template = CHAT
    paths = {}
    for labels in (1, 2):
        torch.manual_seed(labels)
        config = transformers.LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=512,
            pad_token_id=tokenizer.pad_token_id,
            num_labels=labels,
        )
        path = tmp_path_factory.mktemp(f"tiny-chat-rm-{labels}")
        transformers.LlamaForSequenceClassification(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[labels] = path
    return paths, rows


def public_pointwise(path, rows, dtype) -> dict[str, dict[str, float]]:
    """The public pointwise scorer, re-implemented from its description: each category on its
    own, the answers in order (chosen, rejected per pair) in batches of 8; the chat [user:
    question, assistant: answer] through the chat template, tokenized with padding, cut from the
    right at 8,192 tokens; one logit as it is, else the softmax of the last label."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype)
    model.eval()
    scores: dict[str, dict[str, float]] = {}
    for category in dict.fromkeys(r["category"] for r in rows):
        entries = [
            (r["id"], label, r["question"], r[label])
            for r in rows
            if r["category"] == category
            for label in ("chosen", "rejected")
        ]
        for i in range(0, len(entries), 8):
            batch = entries[i : i + 8]
            texts = [
                tok.apply_chat_template(
                    [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                    tokenize=False,
                )
                for _, _, q, a in batch
            ]
            enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=8192)
            with torch.no_grad():
                logits = model(**enc).logits
            for j, (rid, label, _, _) in enumerate(batch):
                score = (
                    logits[j, 0].item()
                    if logits.shape[-1] == 1
                    else torch.softmax(logits[j], dim=-1)[-1].item()
                )
                scores.setdefault(rid, {})[label] = score
    return scores


def test_the_published_protocol_equals_the_public_pointwise_scorer(tiny_chat_rms, tmp_path):
    """On every pair of a release (two categories with pair counts that are not multiples of
    the batch, and one pair whose answers run past 8,192 tokens), `--protocol published` gives
    the public scorer's score to 1e-5 and its win rate (ties lose), in bf16 (its dtype) and
    fp32, for a one-logit and a two-label model; the profile never goes in, and the answers
    it cut are counted."""
    from pipeline.eval.evaluate import evaluate

    paths, rows = tiny_chat_rms
    long = "word " * 8300  # both answers cut to the same 8,192 tokens: a tie, which loses
    rows = [
        dict(
            r,
            id=f"{r['category'][:3]}-{r['id']}",
            profile=[{"id": "x", "category": r["category"], "text": "I garden. " * 50}],
        )
        for r in rows
    ] + [row_like(rows[0], id="long", chosen=long + "yes", rejected=long)]
    release = write_release(tmp_path / "release", rows)
    for labels, dtype in ((1, None), (2, "fp32")):
        path = paths[labels]
        rm = parse_spec(
            f"hf:{path}" + (f",dtype={dtype}" if dtype else ""),
            llm=None,
            judge_model="",
            context="none",
            protocol="published",
        )
        assert rm.net.dtype == (torch.bfloat16 if dtype is None else torch.float32)
        loaded, [result] = asyncio.run(evaluate(release, [rm], n_resamples=50))
        ref = public_pointwise(path, loaded, torch.bfloat16 if dtype is None else torch.float32)
        for p in result["pairs"]:
            assert p["score_chosen"] == pytest.approx(ref[p["id"]]["chosen"], abs=1e-5)
            assert p["score_rejected"] == pytest.approx(ref[p["id"]]["rejected"], abs=1e-5)
        wins = sum(s["chosen"] > s["rejected"] for s in ref.values())
        assert result["metrics"]["accuracy"] == pytest.approx(wins / len(ref), abs=1e-12)
        assert 0 < wins < len(ref) and len({round(s["chosen"], 4) for s in ref.values()}) > 3
        long_pair = next(p for p in result["pairs"] if p["id"] == "long")
        assert long_pair["score_chosen"] == long_pair["score_rejected"] and not long_pair["won"]
        assert result["truncation"]["answers_cut"] == 2 and result["protocol"] == "published"
        assert result["context"] == "none"


def row_like(base: dict, **changes) -> dict:
    return {**base, **changes, "category": "Lifestyle_and_Personal_Development"}


def test_the_published_protocol_refuses_what_its_scorer_does_not_do(tiny_rm, tiny_chat_rms):
    from pipeline.eval.rewards import SpecError

    bert, _ = tiny_rm
    paths, _ = tiny_chat_rms
    published = {"llm": None, "judge_model": "", "context": "none", "protocol": "published"}
    with pytest.raises(SpecError, match="no chat template, which the published protocol"):
        parse_spec(f"hf:{bert}", **published)
    with pytest.raises(SpecError, match="max_length is fixed by the published protocol"):
        parse_spec(f"hf:{paths[1]},max_length=512", **published)
    with pytest.raises(SpecError, match="the published protocol has no pairwise ranker"):
        parse_spec(f"hf-pair:{paths[1]}", **published)
    with pytest.raises(SpecError, match="gives the model the question only"):
        parse_spec(f"hf:{paths[1]},context=profile", **published)
