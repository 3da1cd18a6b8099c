"""Prompts as model inputs (``PromptBatch``, and steering's ``encode`` on top of it) never mutate the
tokenizer, and pad on the tokenizer's own side."""

from __future__ import annotations

from tokenizers import models, pre_tokenizers, Regex, Tokenizer
from transformers import PreTrainedTokenizerFast

from steerformer.prompts import PromptBatch


def _gpt2_like_tokenizer(padding_side: str = "right") -> PreTrainedTokenizerFast:
    """A character tokenizer with an end-of-text token and no pad token, like GPT-2's."""
    chars = list("abcdefghijklmnopqrstuvwxyz .")
    vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", padding_side=padding_side)


def test_prompt_batch_leaves_the_tokenizer_unchanged() -> None:
    tok = _gpt2_like_tokenizer()
    assert tok.pad_token is None
    before = set(tok.__dict__), dict(tok.special_tokens_map), tok.pad_token, tok.pad_token_id, tok.padding_side
    batch = PromptBatch.from_texts(["ab", "c d."], tok)
    assert (set(tok.__dict__), dict(tok.special_tokens_map), tok.pad_token, tok.pad_token_id, tok.padding_side) == before
    assert tok.pad_token is None
    # "c d." is 4 characters: ids 3, 27, 4, 28; "ab" is 1, 2 padded on the right with <eos> = 0.
    assert batch.input_ids.tolist() == [[1, 2, 0, 0], [3, 27, 4, 28]]
    assert batch.attention_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch.rows() == [[1, 2], [3, 27, 4, 28]]


def test_prompt_batch_pads_on_the_tokenizer_side() -> None:
    batch = PromptBatch.from_texts(["ab", "abc"], _gpt2_like_tokenizer("left"))
    assert batch.input_ids.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert batch.attention_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert batch.rows() == [[1, 2], [1, 2, 3]]


def test_steering_encode_leaves_the_tokenizer_unchanged() -> None:
    from steerformer.steering.measure import encode
    from tests.models import make_model

    tok = _gpt2_like_tokenizer()
    batch = encode(make_model("gpt2"), ["a cat", "b"], tok)
    assert tok.pad_token is None
    assert batch.input_ids.tolist() == [[1, 27, 3, 1, 20], [2, 0, 0, 0, 0]]
