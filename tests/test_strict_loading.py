"""Loading for steer, collapse and the statistics is strict: a tensor that transformers would fill at
random (missing, or of another shape) is refused in one line and nothing is saved; a head the task
does not use (the LM head of a checkpoint loaded as its base model, a base model's pooler) stays
quiet — transformers' load-report table never reaches the user's terminal."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from steerformer.consistency import MissingHeadError
from steerformer.errors import CheckpointError
from steerformer.loading import load_model

from .broken_checkpoints import drop_tensor, edit_config, edit_header
from .models import SPECS, family_config, make_model

runner = CliRunner()


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """GPT-2 with its LM head; Llama with an untied LM head, and its base model alone; BERT for
    masked LM (no pooler weights)."""
    root = tmp_path_factory.mktemp("ckpts")
    make_model("gpt2", dtype=torch.float32).save_pretrained(root / "gpt2")
    cfg = family_config("llama")
    cfg.tie_word_embeddings = False
    torch.manual_seed(0)
    lm = SPECS["llama"][2](cfg)
    lm.save_pretrained(root / "llama-lm")
    lm.model.save_pretrained(root / "llama-base")
    make_model("bert-mlm", dtype=torch.float32).save_pretrained(root / "bert-mlm")
    return {p.name: p for p in root.iterdir()}


@pytest.fixture
def transformers_log():
    """Every message transformers logs (its loggers do not propagate to pytest's caplog)."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep(level=logging.DEBUG)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def _cli(args):
    from steerformer_cli.main import app

    res = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output and "LOAD REPORT" not in res.output, res.output
    return res


def _copy(saved, name: str, tmp_path: Path) -> Path:
    d = tmp_path / name
    shutil.copytree(saved[name], d)
    return d


def _mlp_shape_lie(d: Path) -> None:  # [64, 256] stored, [128, 128] claimed: same bytes, not an attention tensor
    edit_header(d / "model.safetensors", lambda h: h["transformer.h.0.mlp.c_fc.weight"].update(shape=[128, 128]))


def _bin_without_attention_output(d: Path) -> None:  # no safetensors header to check before loading
    from safetensors.torch import load_file

    tensors = load_file(str(d / "model.safetensors"))
    del tensors["transformer.h.0.attn.c_proj.weight"]
    (d / "model.safetensors").unlink()
    torch.save(tensors, d / "pytorch_model.bin")


BROKEN = {
    "mlp-tensor-missing": (lambda d: drop_tensor(d, "transformer.h.0.mlp.c_fc.weight"),
                           "h.0.mlp.c_fc.weight' missing from the checkpoint"),
    "mlp-shape-lie": (_mlp_shape_lie, "h.0.mlp.c_fc.weight' is [128, 128] in the checkpoint but GPT2"),
    "bin-missing-attention-output": (_bin_without_attention_output, "h.0.attn.c_proj.weight' missing"),
}


@pytest.mark.parametrize("case", list(BROKEN))
@pytest.mark.parametrize("command", ["steer", "collapse"])
def test_weights_transformers_would_fill_at_random_are_refused(saved, tmp_path, transformers_log, case, command):
    d = _copy(saved, "gpt2", tmp_path)
    BROKEN[case][0](d)
    out = tmp_path / "out"
    args = {"steer": ["steer", d, "--eigvec", "0", "--gain", "1", "--out", out],
            "collapse": ["collapse", d, "--passes", "1", "--n-prompts", "2", "--length", "4", "--out", out]}[command]
    res = _cli(args)
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and BROKEN[case][1] in last and "random" in last, res.output
    assert not out.exists()
    assert not any("LOAD REPORT" in m for m in transformers_log)


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_full_model_statistics_refuse_them_too(saved, tmp_path, transformers_log, case) -> None:
    from steerformer.stats import model_hidden_states

    d = _copy(saved, "gpt2", tmp_path)
    BROKEN[case][0](d)
    with pytest.raises(CheckpointError, match="random") as info:
        model_hidden_states(d, input_ids=[[1, 2, 3]])
    assert BROKEN[case][1] in str(info.value)
    assert not any("LOAD REPORT" in m for m in transformers_log)


def test_a_missing_head_the_task_needs_is_refused_and_not_saved(saved, tmp_path, transformers_log) -> None:
    """A base model whose config claims the LM-head class: steering would save a random head."""
    d = _copy(saved, "llama-base", tmp_path)
    edit_config(d, architectures=["LlamaForCausalLM"])
    np.save(tmp_path / "u.npy", np.ones(32))
    res = _cli(["steer", d, "--direction", tmp_path / "u.npy", "--gain", "1", "--out", tmp_path / "out"])
    assert res.exit_code == 2 and "lm_head.weight" in res.output and "random" in res.output, res.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(MissingHeadError, match="lm_head.weight"):
        load_model(saved["llama-base"], auto_class="AutoModelForCausalLM")
    assert not any("LOAD REPORT" in m for m in transformers_log)


@pytest.mark.parametrize("name, auto_class, cls", [
    ("llama-lm", "AutoModel", "LlamaModel"),  # lm_head.weight: unexpected, unused
    ("bert-mlm", "AutoModel", "BertModel"),  # cls.predictions.*: unexpected; pooler.*: missing, never run
    ("gpt2", "AutoModel", "GPT2Model"),
    ("llama-lm", "AutoModelForCausalLM", "LlamaForCausalLM"),
], ids=["base-of-an-untied-lm", "bert-base-of-mlm", "gpt2-base-of-lm", "lm-as-itself"])
def test_expected_mismatches_load_quietly(saved, transformers_log, name, auto_class, cls) -> None:
    net = load_model(saved[name], auto_class=auto_class)
    assert type(net).__name__ == cls
    assert not any("LOAD REPORT" in m for m in transformers_log), transformers_log
    # the base model's weights are the checkpoint's, bit for bit (nothing was filled at random)
    from safetensors.torch import load_file

    stored = load_file(str(saved[name] / "model.safetensors"))
    prefix = f"{net.base_model_prefix}."
    for key, value in net.base_model.state_dict().items():
        full = key if key in stored else prefix + key
        if full in stored:
            assert torch.equal(value, stored[full]), key
        else:
            assert key.startswith("pooler.") or "rotary" in key or key.endswith("inv_freq"), key


def test_collapse_of_a_base_model_without_lm_head_is_quiet_and_skips_decoding(saved, tmp_path, transformers_log,
                                                                               caplog) -> None:
    with caplog.at_level(logging.WARNING):
        res = _cli(["collapse", saved["llama-base"], "--passes", "1", "--n-prompts", "2", "--length", "4",
                    "--out", tmp_path / "out"])
    assert res.exit_code == 0, res.output
    assert "greedy continuation" not in res.output and "no LM head weights (lm_head.weight)" in caplog.text
    assert not any("LOAD REPORT" in m for m in transformers_log)


def test_collapse_and_statistics_of_an_lm_checkpoint_show_no_load_report(saved, tmp_path, transformers_log) -> None:
    res = _cli(["collapse", saved["llama-lm"], "--passes", "1", "--n-prompts", "2", "--length", "4", "--no-decode",
                "--out", tmp_path / "c"])
    assert res.exit_code == 0, res.output
    from steerformer.stats import model_hidden_states

    hs = model_hidden_states(saved["llama-lm"], input_ids=[[1, 2, 3]])
    assert hs.states.shape[0] == 3  # embeddings + 2 layers
    assert not any("LOAD REPORT" in m for m in transformers_log), transformers_log


def test_a_real_mismatch_is_a_checkpoint_error_in_the_library(saved, tmp_path) -> None:
    d = _copy(saved, "gpt2", tmp_path)
    _mlp_shape_lie(d)
    with pytest.raises(CheckpointError, match=r"'transformer.h.0.mlp.c_fc.weight' is \[128, 128\] in the checkpoint"):
        load_model(d, auto_class="AutoModelForCausalLM")
