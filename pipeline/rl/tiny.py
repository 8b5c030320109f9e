"""A tiny randomly initialised causal LM with a word-level tokenizer, built from local text: the
policy the RL tests and the bench train on CPU (nothing downloaded). Untrained, it writes
random words of its vocabulary; it exists to exercise the RL loop, not to be good."""

from __future__ import annotations

import re
from pathlib import Path

WORD = re.compile(r"[A-Za-z']+|[.,:;!?\-]")
SPECIAL = ["<pad>", "<unk>", "<s>", "</s>"]


def build_tiny_policy(
    path: Path,
    texts: list[str],
    *,
    hidden: int = 32,
    layers: int = 2,
    max_vocab: int = 2000,
    seed: int = 0,
) -> Path:
    """Write a tiny Llama-architecture model and a word-level tokenizer of `texts` to `path`."""
    from collections import Counter

    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    counts = Counter(w.lower() for t in texts for w in WORD.findall(t))
    vocab = SPECIAL + [w for w, _ in counts.most_common(max_vocab - len(SPECIAL))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()]
    )
    tok.normalizer = normalizers.Lowercase()
    tok.decoder = decoders.WordPiece(prefix="##")  # words joined with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
