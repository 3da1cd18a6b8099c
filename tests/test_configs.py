"""Options as configs — dataclasses with help and checks, the CLI options generated
from them, results storing them, resume comparing them; renamed options keep a deprecated alias."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from steerformer.configs import CollapseConfig, StatsConfig, SteerConfig
from steerformer.errors import InvalidArgumentError
from steerformer_cli.main import app
from tests.models import make_model

COMMANDS = {"analyze": StatsConfig, "collapse": CollapseConfig, "steer": SteerConfig}


def _click_params(name: str) -> dict:
    import typer.main

    group = typer.main.get_command(app)
    return {p.name: p for p in group.commands[name].params}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_options_are_generated_from_the_config(command) -> None:
    """One declaration per option: every command-line field of the config is an option of the
    command with the field's flag, default (or its negation for an inverted flag), help and choices."""
    cls = COMMANDS[command]
    params = _click_params(command)
    n = 0
    for f in dataclasses.fields(cls):
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
        SteerConfig(strength=1.0, gain=2.0)
    with pytest.raises(InvalidArgumentError, match="target_alignment=1.5"):
        SteerConfig(target_alignment=1.5)
    SteerConfig(mode="ablate", target_alignment=1.5)  # the steering checks do not apply to ablation
    assert StatsConfig.from_dict(StatsConfig(n_prompts=7).to_dict()) == StatsConfig(n_prompts=7)
    assert CollapseConfig.from_dict({"prompts": 3, "unknown": 1}).n_prompts == 3  # stored before the rename


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


def test_collapse_old_keyword_warns_and_still_works() -> None:
    from steerformer.collapse import collapse

    model = make_model("gpt2-base")
    with pytest.warns(DeprecationWarning, match=r"collapse\(prompts=...\) is deprecated; use n_prompts="):
        old = collapse(model, prompts=2, length=5, passes=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = collapse(model, n_prompts=2, length=5, passes=1)
    torch.testing.assert_close(torch.as_tensor(old.e), torch.as_tensor(new.e), rtol=0, atol=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'promts'"):
        collapse(model, promts=2)


def test_steer_record_stores_its_config() -> None:
    from steerformer.steering import steer

    model = make_model("gpt2")
    rec = steer(model, eigvec=0, gain=0.5, layer=0, solve="exact", report=False)
    assert rec.config == SteerConfig(gain=0.5, layer=0, solve="exact", report=False).to_dict()


def test_collapse_cli_old_flag_is_hidden_and_warns(tmp_path) -> None:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["collapse", "--help"], terminal_width=200)
    assert "--n-prompts" in res.output and "--prompts " not in res.output
    res = CliRunner().invoke(app, ["collapse", str(tmp_path / "no-such-model"), "--prompts", "0"])
    assert res.exit_code == 2
    assert "--prompts is deprecated; use --n-prompts" in res.output and "--n-prompts=0" in res.output


def test_analyze_old_dtype_flag_is_hidden_and_warns(tmp_path) -> None:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["analyze", "--help"], terminal_width=200)
    assert "--eig-dtype" in res.output and "--dtype " not in res.output
    res = CliRunner().invoke(app, ["analyze", str(tmp_path / "no-such-model"), "--dtype", "float32",
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 2  # the model does not exist, but the flag was accepted with a warning
    assert "analyze --dtype is deprecated; use --eig-dtype" in res.output


def test_run_dynamics_old_names_warn_and_give_the_same_numbers() -> None:
    from steerformer.dynamics import run_dynamics

    model = make_model("gpt2")
    with pytest.warns(DeprecationWarning, match=r"run_dynamics\(prompts=...\) is deprecated; use n_prompts="):
        old = run_dynamics(model, prompts=3, n_tokens=4, seed=1)
    with pytest.warns(DeprecationWarning, match=r"run_dynamics\(model_or_path=...\)"):
        run_dynamics(model_or_path=model, n_prompts=1, n_tokens=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = run_dynamics(model, n_prompts=3, n_tokens=4, seed=1)
    torch.testing.assert_close(old.states, new.states, rtol=0, atol=0)
    assert new.states.shape[1] == 3


def test_progress_takes_a_bool_and_an_old_callable_warns() -> None:
    from steerformer.spectra import spectra

    F = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    seen = []
    with pytest.warns(DeprecationWarning, match="progress=<callable> is deprecated"):
        old = spectra(F, progress=lambda it: seen.append(1) or it)
    assert seen == [1]
    new = spectra(F, progress=True)
    torch.testing.assert_close(torch.as_tensor(old.eigenvalues[0]), torch.as_tensor(new.eigenvalues[0]), rtol=0, atol=0)


def test_steer_old_keyword_warns() -> None:
    from steerformer.steering import steer

    with pytest.warns(DeprecationWarning, match=r"steer\(dynamics_prompts=...\) is deprecated; use dynamics_n_prompts="):
        rec = steer(make_model("gpt2"), eigvec=0, gain=0.5, layer=0, solve="exact", report=False, dynamics_prompts=3)
    assert rec.config["dynamics_n_prompts"] == 3


def test_loaders_take_model_and_warn_on_the_old_keyword() -> None:
    from steerformer.loading import load_tokenizer, open_source

    model = make_model("gpt2")
    with pytest.warns(DeprecationWarning, match=r"open_source\(model_or_path=...\) is deprecated; use model="):
        src = open_source(model_or_path=model)
    assert src.model is model and open_source(model=model).model is model
    with pytest.warns(DeprecationWarning, match=r"load_tokenizer\(model_or_path=...\)"):
        assert load_tokenizer(model_or_path=model) is None  # a tiny config model ships no tokenizer
