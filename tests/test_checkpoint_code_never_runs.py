"""A checkpoint's own Python code never runs, even when the user answers "y" to transformers'
"Do you wish to run the custom code? [y/N]": an unknown ``model_type`` with an ``auto_map`` is
refused in one line before transformers can ask, and every load passes ``trust_remote_code=False``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.cli_process import run_cli
from tests.models import make_model


def _evil_checkpoint(root: Path, model_type: str) -> tuple[Path, Path]:
    """A tiny GPT-2 whose config names ``model_type`` and an ``auto_map`` into ``evil.py``, whose
    import touches a sentinel file."""
    d, sentinel = root / "evil", root / "remote-code-ran"
    make_model("gpt2", dtype=torch.float32).save_pretrained(d)
    (d / "evil.py").write_text(
        f"from pathlib import Path\nPath({str(sentinel)!r}).touch()\n"
        "from transformers import GPT2Config, GPT2Model as EvilModel, PreTrainedTokenizerFast as EvilTok\n"
        f"class EvilConfig(GPT2Config):\n    model_type = {model_type!r}\n")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = model_type
    cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel",
                       "AutoModelForCausalLM": "evil.EvilModel"}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilTok", None]},
                                                          "tokenizer_class": "EvilTok"}))
    (root / "pos.txt").write_text("good\n")
    (root / "neg.txt").write_text("bad\n")
    return d, sentinel


def _commands(d: Path, root: Path) -> dict[str, list]:
    return {
        "analyze": ["analyze", d, "--out", root / "a", "--spectra-only"],
        "steer": ["steer", d, "--eigvec", "0", "--gain", "1", "--out", root / "s"],
        "direction-make": ["direction", "make", d, "--positive", root / "pos.txt", "--negative", root / "neg.txt",
                           "--out", root / "dir"],
        "collapse": ["collapse", d, "--out", root / "c"],
    }


@pytest.mark.parametrize("command", ["analyze", "steer", "direction-make", "collapse"])
def test_a_y_on_stdin_never_runs_checkpoint_code(tmp_path, command) -> None:
    d, sentinel = _evil_checkpoint(tmp_path, "evilmodel")
    res = run_cli(_commands(d, tmp_path)[command], stdin="y\ny\ny\n")
    assert not sentinel.exists(), res.stderr[-2000:]
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "model_type='evilmodel' is not supported" in err[0] and "auto_map" in err[0], err
    assert "custom code" not in res.stdout + res.stderr  # transformers never got to ask
    assert not any((tmp_path / o).exists() for o in ("a", "s", "dir", "c"))


def test_auto_map_beside_a_supported_model_type_is_ignored_under_a_y(tmp_path) -> None:
    d, sentinel = _evil_checkpoint(tmp_path, "gpt2")
    res = run_cli(_commands(d, tmp_path)["steer"], stdin="y\ny\ny\n")
    assert res.returncode == 0, res.stderr[-2000:]
    assert not sentinel.exists()
    assert "custom code" not in res.stdout + res.stderr


def test_the_library_never_passes_trust_remote_code(tmp_path) -> None:
    from steerformer.errors import InvalidArgumentError
    from steerformer.loading import load_model

    d, sentinel = _evil_checkpoint(tmp_path, "gpt2")
    with pytest.raises(InvalidArgumentError, match="trust_remote_code"):
        load_model(d, trust_remote_code=True)
    load_model(d)
    assert not sentinel.exists()
