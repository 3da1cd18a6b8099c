"""A steered checkpoint carries only the source checkpoint's own files: a side file (a
sentence-transformers module's config, a tokenizer file, any file `steer --lazy` copies) that is a
link out of the checkpoint, a link to /dev/zero, or a FIFO is refused in one line (exit 2) and
nothing is written — it used to put the outside file's bytes into the output, copy without end, or
hang."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.cli_process import one_error_line, run_cli, run_cli_here
from tests.models import make_model

SECRET = b"outside-secret-do-not-copy"


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory) -> Path:
    """A tiny BERT saved as a sentence-transformers folder (root Transformer + 1_Pooling) with a tokenizer file."""
    d = tmp_path_factory.mktemp("st") / "model"
    make_model("bert", dtype=torch.float32).save_pretrained(d)
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 64,
                                                             "pooling_mode_mean_tokens": True}))
    (d / "special_tokens_map.json").write_text("{}")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(96)]
    (d / "vocab.txt").write_text("\n".join(words) + "\n")  # a BERT tokenizer: load_tokenizer reads the folder
    return d


def _copy(src: Path, root: Path) -> Path:
    import shutil

    d = root / "model"
    shutil.copytree(src, d)
    (root / "secret.txt").write_bytes(SECRET)
    return d


def _break(d: Path, case: str) -> str:
    """Edit the copy ``d``; return the file the message must name."""
    if case == "pooling-link-outside":
        (d / "1_Pooling" / "config.json").unlink()
        os.symlink(d.parent / "secret.txt", d / "1_Pooling" / "config.json")
        return "1_Pooling/config.json"
    if case == "pooling-link-to-dev-zero":
        os.symlink("/dev/zero", d / "1_Pooling" / "extra.txt")
        return "1_Pooling/extra.txt"
    if case == "pooling-fifo":
        os.mkfifo(d / "1_Pooling" / "pipe")
        return "1_Pooling/pipe"
    if case == "pooling-folder-link-outside":
        (d.parent / "elsewhere").mkdir()
        (d.parent / "elsewhere" / "x.json").write_bytes(SECRET)
        os.symlink(d.parent / "elsewhere", d / "1_Pooling" / "sub")
        return "1_Pooling/sub"
    if case == "tokenizer-link-outside":
        (d / "special_tokens_map.json").unlink()
        os.symlink(d.parent / "secret.txt", d / "special_tokens_map.json")
        return "special_tokens_map.json"
    if case == "modules-json-link-outside":
        (d.parent / "modules.json").write_bytes((d / "modules.json").read_bytes())
        (d / "modules.json").unlink()
        os.symlink(d.parent / "modules.json", d / "modules.json")
        return "modules.json"
    raise AssertionError(case)


CASES = ["pooling-link-outside", "pooling-link-to-dev-zero", "pooling-fifo", "pooling-folder-link-outside",
         "tokenizer-link-outside", "modules-json-link-outside"]


def _contains_secret(root: Path) -> bool:
    return root.exists() and any(p.is_file() and SECRET in p.read_bytes() for p in root.rglob("*"))


@pytest.mark.parametrize("lazy", [False, True], ids=["steer", "steer-lazy"])
@pytest.mark.parametrize("case", CASES)
def test_a_side_file_from_outside_is_refused_and_nothing_is_written(st_folder, tmp_path, case, lazy) -> None:
    d = _copy(st_folder, tmp_path)
    named = _break(d, case)
    out = tmp_path / "out"
    args = ["steer", d, "--eigvec", "0", "--gain", "1", "--out", out] + (["--lazy", "--solve", "exact"] if lazy else [])
    # a FIFO could hang the command: its cases run in a process of their own, with a time limit
    res = run_cli(args, timeout=240) if "fifo" in case else run_cli_here(args)
    line = one_error_line(res)
    assert named.split("/")[-1] in line, line
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    assert not _contains_secret(out)


def test_a_clean_sentence_transformers_folder_still_copies_its_stack(st_folder, tmp_path) -> None:
    for lazy in (False, True):
        out = tmp_path / f"out{lazy}"
        res = run_cli_here(["steer", st_folder, "--eigvec", "0", "--gain", "1", "--out", out]
                           + (["--lazy", "--solve", "exact"] if lazy else []))
        assert res.returncode == 0, res.stderr[-2000:]
        for name in ("modules.json", "1_Pooling/config.json"):
            assert (out / name).read_bytes() == (st_folder / name).read_bytes(), (lazy, name)


def test_the_library_copy_refuses_the_same(st_folder, tmp_path) -> None:
    from steerformer.errors import CheckpointError
    from steerformer.steering import load_for_steering, save_steered, steer

    d = _copy(st_folder, tmp_path)
    _break(d, "pooling-link-to-dev-zero")
    model = load_for_steering(str(d))
    steer(model, torch.ones(64, dtype=torch.float64), strength=2.0, report=False)
    with pytest.raises(CheckpointError, match="refusing to copy"):
        save_steered(model, tmp_path / "o")
    assert not (tmp_path / "o").exists()
