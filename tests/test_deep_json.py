"""JSON of any nesting depth is one line, never a RecursionError: every JSON file steerformer or
transformers reads for a command (safetensors headers, config.json, shard indexes,
generation_config.json, a steered checkpoint's record.json, a collapse run's run.json, --pairs
lines) goes through the one reader, which refuses more than ``MAX_JSON_DEPTH`` levels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from steerformer.errors import FileFormatError
from steerformer.results import MAX_JSON_DEPTH, parse_json

from .broken_checkpoints import DEEP, deep_header
from .models import make_model

runner = CliRunner()
WORDS = f"nested more than {MAX_JSON_DEPTH} levels deep"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    from steerformer.collapse import collapse
    from steerformer.steering import save_steered, steer

    root = tmp_path_factory.mktemp("json")
    model = make_model("gpt2", dtype=torch.float32)
    model.save_pretrained(root / "plain")
    steer(model, torch.ones(64, dtype=torch.float64), gain=0.5, solve="exact", report=False)
    save_steered(model, root / "steered")
    collapse(make_model("gpt2-base", dtype=torch.float32), n_prompts=2, length=4, passes=1, out=root / "run")
    return {p.name: p for p in root.iterdir()}


def _index(d: Path) -> None:
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    (d / "model.safetensors.index.json").write_text('{"metadata": {}, "weight_map": ' + DEEP + "}")


BREAK = {
    "safetensors-header": ("plain", lambda d: deep_header(d / "model.safetensors")),
    "config.json": ("plain", lambda d: (d / "config.json").write_text('{"model_type": "gpt2", "x": ' + DEEP + "}")),
    "shard-index": ("plain", _index),
    "generation_config.json": ("plain", lambda d: (d / "generation_config.json").write_text('{"a": ' + DEEP + "}")),
    "steered-header": ("steered", lambda d: deep_header(d / "model.safetensors")),
    "steered-config.json": ("steered", lambda d: (d / "config.json").write_text('{"model_type": "gpt2", "x": ' + DEEP + "}")),
    "record.json": ("steered", lambda d: (d / "steerformer" / "record.json").write_text(DEEP)),
    "run.json": ("run", lambda d: [(d / "collapse.npz").unlink(),  # plot-collapse reads the stored passes
                                   (d / "run.json").write_text('{"options": ' + DEEP + "}")]),
}

COMMANDS = {
    "steer": lambda d, o: ["steer", d, "--eigvec", "0", "--gain", "1", "--out", o],
    "analyze": lambda d, o: ["analyze", d, "--spectra-only", "--no-plots", "--out", o],
    "simulate-bridge": lambda d, o: ["simulate", "bridge", "--model", d, "--runs", "1", "--t1", "2", "--out", o],
    "collapse": lambda d, o: ["collapse", d, "--passes", "1", "--n-prompts", "2", "--length", "4", "--out", o],
    "verify": lambda d, o: ["verify", d],
    "unsteer": lambda d, o: ["unsteer", d, "--out", o],
    "collapse-resume": lambda d, o: ["collapse", d.parent / "plain", "--passes", "2", "--n-prompts", "2", "--length", "4",
                                     "--out", d, "--resume"],
    "plot-collapse": lambda d, o: ["plot-collapse", d, "--out", f"{o}.png"],
}

CASES = [(f, c) for f in ("safetensors-header", "config.json", "shard-index")
         for c in ("steer", "analyze", "simulate-bridge", "collapse")]
CASES += [("generation_config.json", c) for c in ("steer", "collapse")]
CASES += [(f, c) for f in ("steered-header", "steered-config.json", "record.json") for c in ("verify", "unsteer", "steer")]
CASES += [("run.json", c) for c in ("collapse-resume", "plot-collapse")]


@pytest.mark.parametrize("where, command", CASES, ids=[f"{f}-{c}" for f, c in CASES])
def test_deeply_nested_json_is_one_line(saved, tmp_path, where, command) -> None:
    from steerformer_cli.main import app

    src, breaks = BREAK[where]
    d = tmp_path / src
    shutil.copytree(saved[src], d)
    breaks(d)
    if command == "collapse-resume":
        shutil.copytree(saved["plain"], tmp_path / "plain")
    res = runner.invoke(app, [str(a) for a in COMMANDS[command](d, tmp_path / "out")])
    assert "Traceback" not in res.output and not isinstance(res.exception, RecursionError), res.output
    # verify reports a config it cannot load as a failed check (exit 1); everything else refuses (exit 2)
    assert res.exit_code in ((1, 2) if command == "verify" else (2,)), res.output
    # unsteer finds the changed config.json by its recorded hash before parsing it
    assert WORDS in res.output or where == "steered-config.json" and "config.json: changed" in res.output, res.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.png").exists()


def test_pairs_file_with_a_deep_line_is_one_line(saved, tmp_path) -> None:
    from steerformer_cli.main import app

    (tmp_path / "pairs.jsonl").write_text('{"positive": "a", "negative": "b"}\n' + DEEP + "\n")
    res = runner.invoke(app, ["steer", str(saved["plain"]), "--pairs", str(tmp_path / "pairs.jsonl"), "--gain", "1"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "line 2" in res.output, res.output


@pytest.mark.parametrize("depth, ok", [(MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False), (990, False),
                                       (100_000, False)])
def test_the_reader_limit(depth, ok) -> None:
    text = "[" * depth + "]" * depth
    if ok:
        value = parse_json(text, "f.json")
        for _ in range(depth - 1):
            value = value[0]
        assert value == []
    else:
        with pytest.raises(FileFormatError, match=f"f.json is {WORDS}"):
            parse_json(text, "f.json")


def test_the_reader_keeps_real_files(saved) -> None:
    for f in (saved["steered"] / "steerformer" / "record.json", saved["plain"] / "config.json", saved["run"] / "run.json"):
        assert parse_json(f.read_bytes(), f) == json.loads(f.read_text())
