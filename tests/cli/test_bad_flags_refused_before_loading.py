"""Every flag that can be checked without the model is refused before the model loads: one line
naming the flag, exit 2, in well under the seconds a load takes (SmolLM2: 10+ s here). And the
renaming of library argument names into flags touches only names, never prose or code."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from steerformer.loading import bundled_smollm2_path
from steerformer_cli.main import app

runner = CliRunner()

#: generous: a refusal takes ~0.3 s on a loaded 2-core machine; loading SmolLM2 takes 10-40 s
BOUND_S = 2.0

BAD = [
    (["steer", "{m}", "--token", "the", "--layer", "99"], "--layer=99 is invalid"),
    (["steer", "{m}", "--token", "the", "--layers", "99"], "--layers=[99] is invalid"),
    (["steer", "{m}", "--method", "ablation", "--direction", "{tmp}/v.npy", "--layers", "99"],
     "--layers=[99] is invalid"),
    (["steer", "{m}", "--token", "the", "--max-kl", "-1"], "--max-kl=-1.0 is invalid"),
    (["steer", "{m}", "--direction", "{tmp}/missing.npy"], "--direction="),
    (["steer", "{m}", "--token", "the", "--concept", "sea"], "--concept="),
    (["analyze", "{m}", "--layers", "99", "--out", "{tmp}/a"], "--layers=[99] is invalid"),
    (["analyze", "{m}", "--top-k", "-1", "--out", "{tmp}/a"], "--top-k=-1 is invalid"),
    (["evaluate", "{m}", "--token", "sea", "--out", "{tmp}/e", "--layers", "99"], "--layers=[99] is invalid"),
    (["evaluate", "{m}", "--token", "sea", "--out", "{tmp}/e", "--max-kl", "0"], "--max-kl=0.0 is invalid"),
    (["evaluate", "{m}", "--token", "sea", "--out", "{tmp}/e", "--coeffs", "x"], "--coeffs='x' is invalid"),
    (["evaluate", "{m}", "--token", "sea", "--out", "{tmp}/e", "--questions", "0"], "--questions=0 is invalid"),
    (["collapse", "{m}", "--passes", "0", "--out", "{tmp}/c"], "--passes=0 is invalid"),
    (["direction", "make", "{m}", "--out", "{tmp}/d", "--positive", "{tmp}/p.txt", "--negative", "{tmp}/p.txt",
      "--layers", "99"], "--layers=[99] is invalid"),
    (["direction", "make", "{m}", "--out", "{tmp}/d", "--positive", "{tmp}/missing.txt"], "--positive="),
    (["direction", "make", "{m}", "--out", "{tmp}/d", "--positive", "{tmp}/p.txt"], "--negative is missing"),
]

MODELS = ["minilm"] + (["smollm2"] if bundled_smollm2_path() is not None else [])


@pytest.mark.parametrize("model", MODELS)
def test_each_bad_flag_is_refused_in_under_two_seconds_with_exit_2(model, tmp_path) -> None:
    (tmp_path / "p.txt").write_text("a sentence\n")
    import numpy as np

    np.save(tmp_path / "v.npy", np.ones(8))
    cases = [([a.format(m=model, tmp=tmp_path) for a in args], words) for args, words in BAD]
    for argv, _ in cases:  # each command's imports paid once, untimed (a model load would recur)
        runner.invoke(app, argv)
    slow = []
    for argv, words in cases:
        took = float("inf")
        for _ in range(2):  # the quicker of two: a shared machine's hiccup is no model load
            t0 = time.perf_counter()
            res = runner.invoke(app, argv)
            took = min(took, time.perf_counter() - t0)
        assert res.exit_code == 2, (argv, res.output)
        assert words in res.output, (argv, res.output)
        assert res.output.count("error:") == 1, res.output
        if took > BOUND_S:
            slow.append((argv, round(took, 2)))
    assert not slow, f"refused only after loading the model: {slow}"


def _message_in(command: list[str], err) -> str:
    from typer.main import get_command

    from steerformer_cli._common import cli_message

    group = get_command(app)
    cmd = group.commands[command[0]]
    with cmd.make_context(command[0], command[1:]) as ctx:
        with ctx:
            return cli_message(err)


def test_renaming_into_flags_touches_the_offending_name_not_prose_or_code() -> None:
    from steerformer.errors import bad_argument

    err = bad_argument("max_kl", -1.0, "a KL budget > 0 in nats per token (e.g. 0.3)")
    assert _message_in(["steer", "minilm"], err) == \
        "--max-kl=-1.0 is invalid: expected a KL budget > 0 in nats per token (e.g. 0.3)."
    err = bad_argument("direction", "v.npy", "a float array", "Save it with np.save(path, np.asarray(v, dtype=float)).")
    assert _message_in(["steer", "minilm"], err) == ("--direction='v.npy' is invalid: expected a float array. "
                                                     "Save it with np.save(path, np.asarray(v, dtype=float)).")
    err = bad_argument("layers", [99], "layer indices in [-6, 5]")
    assert _message_in(["steer", "minilm"], err).startswith("--layers=[99] is invalid")
    err = bad_argument("gain", None, "a fixed gain= or strength= for a lazy edit")
    assert _message_in(["steer", "minilm"], err) == \
        "--gain is missing: expected a fixed --gain= or --strength= for a lazy edit."
    err = bad_argument("model", "x", "a causal LM")
    assert _message_in(["steer", "minilm"], err) == "MODEL='x' is invalid: expected a causal LM."


def test_an_int_flag_is_shown_as_given_not_as_the_librarys_list() -> None:
    from steerformer.errors import bad_argument

    err = bad_argument("layer", [99], "layer indices in [-6, 5]")  # select_layers lists what it got
    assert _message_in(["steer", "minilm"], err).startswith("--layer=99 is invalid")
    err = bad_argument("layers", [99], "layer indices in [-6, 5]")  # a list flag keeps its list
    assert _message_in(["steer", "minilm"], err).startswith("--layers=[99] is invalid")


def test_a_flag_with_its_value_in_parentheses_or_in_a_fix_is_renamed_prose_is_not() -> None:
    from steerformer.errors import bad_argument

    err = bad_argument("decode_passes", "1,100", "loop counts up to passes (20)")
    assert _message_in(["collapse", "minilm"], err) == \
        "--decode-passes='1,100' is invalid: expected loop counts up to --passes (20)."
    err = bad_argument("n_prompts", 10**9, "a count that fits in memory", "Use n_prompts=5 or fewer.")
    assert _message_in(["collapse", "minilm"], err) == \
        "--n-prompts=1000000000 is invalid: expected a count that fits in memory. Use --n-prompts=5 or fewer."
