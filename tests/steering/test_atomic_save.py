"""Saving is atomic: a folder steerformer did not write is never replaced, and a failed save leaves
nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from steerformer.errors import InvalidArgumentError
from steerformer.steering import save_steered, steer

from tests.conftest import random_vector
from tests.models import make_model


def test_target_folder_rules_and_failed_save_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    model = make_model("gpt2")
    steer(model, random_vector(), strength=5.0, report=False)
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    for overwrite in (False, True):  # a folder that is not a steerformer output is never replaced
        with pytest.raises(InvalidArgumentError, match="directory=.*not a steerformer steer output"):
            save_steered(model, target, overwrite=overwrite)
    assert (target / "keep.txt").read_text() == "x"
    (target / "keep.txt").unlink()
    save_steered(model, target)
    with pytest.raises(InvalidArgumentError, match="directory=.*overwrite"):
        save_steered(model, target)
    save_steered(model, target, overwrite=True)
    assert (target / "config.json").is_file()

    def broken(path, **kw):
        Path(path, "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(model, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        save_steered(model, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no partial or temporary folder
