"""Exports check what they publish (steering/exports.py, the one place every format goes through):
the steered checkpoint's hashes are verified first, as `unsteer` does, and an output inside (or
around) an input is refused — for every registered format."""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file, save_file

import steerformer as sf

from ..conftest import random_vector, run_cli
from ..formats.gguf_sources import tiny_llama, write_llama_source

FORMATS = ["checkpoint", "peft", "gguf", "control-vector"]


@pytest.fixture(scope="module")
def steered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("publish")
    model = tiny_llama()
    source = write_llama_source(tmp / "source.gguf", model)
    sf.steer(model, random_vector(64, seed=1), strength=1.0, layer=1, report=False)
    return sf.save_steered(model, tmp / "steered"), source


def args_of(fmt, folder, source, out):
    extra = {"gguf": ["--source", source], "control-vector": ["--model-hint", "llama"]}.get(fmt, [])
    return ["export", folder, "--format", fmt, "--out", out, *extra]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_changed_after_saving_is_not_exported(steered, tmp_path, fmt) -> None:
    folder, source = steered
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    weights = next(changed.glob("*.safetensors"))
    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] += 1  # one changed number: the published model would not be the one steered
    save_file(tensors, weights, metadata={"format": "pt"})
    out = tmp_path / ("o.gguf" if fmt in ("gguf", "control-vector") else "o")
    res = run_cli(args_of(fmt, changed, source, out))
    assert res.exit_code == 2 and "is not as it was saved" in res.output and "export" in res.output, res.output
    assert not out.exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_output_inside_the_steered_checkpoint_is_refused(steered, tmp_path, fmt) -> None:
    folder, source = steered
    out = folder / ("inside.gguf" if fmt in ("gguf", "control-vector") else "inside")
    res = run_cli(args_of(fmt, folder, source, out))
    line = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and line.startswith("error: --out=") and str(folder) in line, res.output
    assert "outside the export's input" in line or "apart from the input checkpoint" in line, line  # folders: the CLI's check
    assert not out.exists()
