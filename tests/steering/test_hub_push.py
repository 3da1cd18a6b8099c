"""Hub pushes against local endpoints: a recording stand-in (the folder and card, a branch, a pull
request), one that never answers and one that refuses connections; bad repo ids and a missing
token are refused before any request."""

from __future__ import annotations

from pathlib import Path
import time

import pytest

from steerformer.errors import InvalidArgumentError
from steerformer.steering import push_to_hub, save_steered, steer
from steerformer.steering.hub import HubError

from tests.conftest import random_vector
from tests.models import make_model
from tests.steering.hub_server import RecordingHub, refused_url, SilentEndpoint


@pytest.fixture()
def online(monkeypatch):
    import huggingface_hub.constants

    # The suite runs offline (conftest); these tests talk to 127.0.0.1 only.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture()
def steered_dir(tmp_path: Path) -> Path:
    model = make_model("gpt2")
    steer(model, random_vector(), strength=3.0, solve="exact", report=False)
    return save_steered(model, tmp_path / "steered")


def test_push_to_hub_sends_the_folder_and_card(tmp_path: Path, monkeypatch) -> None:
    model = make_model("gpt2")
    rec = steer(model, random_vector(), strength=7.0)
    out = save_steered(model, tmp_path / "steered")
    card = (out / "README.md").read_text()
    for field in (f"{rec.gain:.6g}", f"{rec.alignment_model_after:.4f}", f"{rec.weight_change:.4g}", "steerformer unsteer",
                  "library_name: transformers", "- steerformer"):
        assert field in card, field
    import huggingface_hub.constants

    # The suite runs offline (conftest); this test talks to 127.0.0.1 only.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with RecordingHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        url = push_to_hub(out, "alice/tiny-steered", private=True, token="hf_test_token")
    assert url.startswith(hub.url + "/alice/tiny-steered/commit/")
    create = next(r for r in hub.requests if r["path"] == "/api/repos/create")
    assert create["json"]["name"] == "tiny-steered" and create["json"]["organization"] == "alice"
    assert create["json"].get("private") is True or create["json"].get("visibility") == "private"
    assert all(r["auth"] == "Bearer hf_test_token" for r in hub.requests)
    expected = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(hub.files) == expected
    assert hub.files["model.safetensors"] == (out / "model.safetensors").read_bytes()
    assert hub.files["README.md"].decode() == card


def test_push_refuses_bad_repo_id_and_missing_token(tmp_path: Path, monkeypatch) -> None:
    model = make_model("gpt2")
    steer(model, random_vector(), strength=2.0, report=False)
    out = save_steered(model, tmp_path / "m")
    with pytest.raises(InvalidArgumentError, match="repo_id="):
        push_to_hub(out, "not a repo//id", token="x")
    import huggingface_hub.constants

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no_tokens"))
    with RecordingHub() as hub:
        with pytest.raises(InvalidArgumentError, match="token"):
            push_to_hub(out, "alice/x", endpoint=hub.url)
    assert hub.requests == []


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
    np.save(tmp_path / "u.npy", random_vector().numpy())
    with SilentEndpoint() as silent:
        res = CliRunner().invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(tmp_path / "u.npy"),
                                       "--gain", "2", "--solve", "exact", "--out", str(tmp_path / "s"),
                                       "--push-to-hub", "alice/x", "--hub-timeout", "0.3"],
                                 env={"HF_ENDPOINT": silent.url, "HF_TOKEN": "hf_t"})
    assert res.exit_code == 2, res.output
    assert "did not answer within 0.3 s" in res.output and "Traceback" not in res.output
    assert (tmp_path / "s" / "config.json").is_file()  # saved before the push
