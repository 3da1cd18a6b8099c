"""No option is ignored in silence: a combination of flags that cannot apply is refused in one line
naming both, before any model loads (the model path here does not exist: a refusal that names it
would have come too late), and --model-hint is checked."""

from __future__ import annotations

import pytest

from steerformer.errors import InvalidArgumentError
from tests.conftest import run_cli, unit_vector
from tests.models import make_model

NO_MODEL = "no-such-model-dir"


def refused(args) -> str:
    res = run_cli(args)
    lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("error: ")]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert NO_MODEL not in lines[0], lines[0]  # refused before the model was looked for
    return lines[0]


@pytest.mark.parametrize("args, flags", [
    (["--min-state-cosine", "0.8", "--gain", "2"], ("--min-state-cosine", "gain")),
    (["--min-state-cosine", "0.8", "--strength", "2"], ("--min-state-cosine", "strength")),
    (["--max-kl", "0.5", "--gain", "2"], ("max-kl", "gain")),
    (["--max-kl", "0.5", "--target-alignment", "0.5"], ("max-kl", "target-alignment")),
    (["--max-kl", "0.5", "--solve", "exact"], ("max-kl", "solve")),
])
def test_a_combination_that_cannot_apply_names_both_flags(args, flags) -> None:
    line = refused(["steer", NO_MODEL, "--token", "x", *args])
    for flag in flags:
        assert flag.replace("_", "-") in line.replace("_", "-"), line


@pytest.mark.parametrize("hint", ["", "a\x00b", "x" * 100_000, "llama 3", "../x"])
@pytest.mark.parametrize("command", ["export", "direction"])
def test_a_bad_model_hint_is_refused_first(tmp_path, command, hint) -> None:
    args = (["export", NO_MODEL, "--format", "control-vector", "--out", tmp_path / "cv.gguf"] if command == "export"
            else ["direction", "export-gguf", NO_MODEL, "--out", tmp_path / "cv.gguf"])
    line = refused([*args, "--model-hint", hint])
    assert line.startswith("error: --model-hint=") and "architecture name" in line, line


def test_an_addition_option_on_an_encoder_is_refused_naming_it() -> None:
    from steerformer.steering import steer

    model = make_model("bert")
    with pytest.raises(InvalidArgumentError, match="max_kl") as exc:
        steer(model, unit_vector(64, 0), max_kl=0.5)
    assert "causal-lm" in str(exc.value) and "\n" not in str(exc.value)
