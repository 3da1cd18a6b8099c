"""Options as configs — dataclasses with help and checks, the CLI options generated
from them, results storing them, resume comparing them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from steerformer.configs import CollapseConfig, StatsConfig, SteerConfig
from steerformer.errors import InvalidArgumentError
from steerformer.steering.methods.paper.config import PaperConfig
from steerformer.steering.registry import built_in_configs
from steerformer_cli.main import app
from tests.models import make_model

#: each command's configs (steer: the call's options and every built-in method's)
COMMANDS = {"analyze": (StatsConfig,), "collapse": (CollapseConfig,), "steer": (SteerConfig, *built_in_configs().values())}


def _click_params(name: str) -> dict:
    import typer.main

    group = typer.main.get_command(app)
    return {p.name: p for p in group.commands[name].params}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_options_are_generated_from_the_config(command) -> None:
    """One declaration per option: every command-line field of the config is an option of the
    command with the field's flag, default (or its negation for an inverted flag), help and choices."""
    params = _click_params(command)
    n = 0
    for f in (f for cls in COMMANDS[command] for f in dataclasses.fields(cls)):
        md = f.metadata
        if not md["cli"]:
            assert f.name not in params
            continue
        n += 1
        if md["invert"]:
            p = params[md["invert"].lstrip("-").replace("-", "_")]
            assert p.opts == [md["invert"]] and p.default is False
        else:
            p = params[f.name]
            flag = (md["flag"] or "--" + f.name.replace("_", "-")).split("/")[0]
            assert p.opts[0] == flag
            assert (p.default if not hasattr(p.default, "value") else p.default.value) == f.default
            if md["choices"]:
                assert [e.value for e in p.type_descriptor.annotation] == list(md["choices"])
        assert p.help == md["help"]
    assert n >= 9


def test_configs_check_their_fields() -> None:
    with pytest.raises(InvalidArgumentError, match="n_prompts=0"):
        StatsConfig(n_prompts=0)
    with pytest.raises(InvalidArgumentError, match="weights='noise'"):
        CollapseConfig(weights="noise")
    with pytest.raises(InvalidArgumentError, match="e_precision='half'"):
        CollapseConfig(e_precision="half")
    with pytest.raises(InvalidArgumentError, match="gain=.*either strength= or gain="):
        PaperConfig(strength=1.0, gain=2.0)
    with pytest.raises(InvalidArgumentError, match="target_alignment=1.5"):
        PaperConfig(target_alignment=1.5)
    assert StatsConfig.from_dict(StatsConfig(n_prompts=7).to_dict()) == StatsConfig(n_prompts=7)
    assert CollapseConfig.from_dict({"n_prompts": 3, "unknown": 1}).n_prompts == 3


def test_cli_refuses_a_bad_config_value_by_its_flag_before_loading(tmp_path) -> None:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["collapse", str(tmp_path / "no-such-model"), "--n-prompts", "0"])
    assert res.exit_code == 2
    assert "--n-prompts=0" in res.output and "no-such-model" not in res.output


def test_collapse_result_stores_its_config_and_resume_compares_it(tmp_path) -> None:
    from steerformer.collapse import CollapseResult, collapse

    model = make_model("gpt2-base")
    res = collapse(model, n_prompts=2, length=5, passes=2, seed=3, out=tmp_path / "run")
    assert res.config == CollapseConfig(n_prompts=2, length=5, passes=2, seed=3, batch_size=2, dtype="float64")
    assert CollapseResult.load(tmp_path / "run").config == res.config
    # passes and early_stop_tol may change on resume; any other field may not
    collapse(model, CollapseConfig(n_prompts=2, length=5, passes=3, seed=3), out=tmp_path / "run", resume=True)
    with pytest.raises(InvalidArgumentError, match=r"seed=3/4"):
        collapse(model, n_prompts=2, length=5, passes=4, seed=4, out=tmp_path / "run", resume=True)


def test_steer_record_stores_its_config() -> None:
    from steerformer.steering import steer

    model = make_model("gpt2")
    rec = steer(model, eigvec=0, gain=0.5, layer=0, solve="exact", report=False)
    assert rec.config == {**SteerConfig(layer=0, report=False).to_dict(), **PaperConfig(gain=0.5, solve="exact").to_dict()}
