"""The Hugging Face reward-model adapter on a tiny, randomly initialised model built here (no
downloads): a BERT sequence classifier and a word-level tokenizer saved to a local folder."""

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
    words = sorted({w for r in rows for k in ("question", "chosen", "rejected") for w in
                    r[k].lower().replace(".", " ").replace(",", " ").split()})  # fmt: skip
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]",
    )  # fmt: skip
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=128, num_labels=1,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config)
    path = tmp_path_factory.mktemp("tiny-rm")
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path, rows


def test_hf_adapter_scores_in_batches_like_one_at_a_time(tiny_rm, tmp_path):
    from pipeline.eval.evaluate import evaluate

    path, rows = tiny_rm
    batched = parse_spec(f"hf:{path},batch_size=8,device=cpu", llm=None, judge_model="",
                         context="none")  # fmt: skip
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

    with pytest.raises(SpecError, match="cannot load a sequence-classification model"):
        parse_spec(f"hf:{tmp_path / 'nothing'}", llm=None, judge_model="", context="none")


def test_a_long_profile_is_cut_never_the_answer(tiny_rm, tmp_path):
    """~3,000-word profiles on a model with a 128-token window: the old adapter cut the prompt
    from the right, so the answer went first and every pair tied (or the positions overflowed).
    Now the context is cut by whole posts, the answers always go in, and the cut is counted."""
    from pipeline.eval.evaluate import evaluate

    path, rows = tiny_rm
    long = [dict(r, profile=[{"id": f"{r['id']}-p{k}", "category": r["category"],
                              "text": "I write long posts about my week and my garden. " * 6}
                             for k in range(50)]) for r in rows]  # fmt: skip
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
