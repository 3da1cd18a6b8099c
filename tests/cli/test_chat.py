"""`steerformer chat` driven in a real terminal (a pseudo-terminal through pexpect) on a steered
tiny Llama GGUF: answers are streamed after "base> " / "steered x1> ", and each one is the greedy
answer that plain transformers gives — the steered checkpoint loaded as an ordinary model, and the
base model (the GGUF's conversion) for ``/strength 0`` and for ``--compare``'s base column."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.cli_process import run_cli
from tests.formats.gguf_sources import write_tiny_chat_gguf

pexpect = pytest.importorskip("pexpect")

ROOT = Path(__file__).resolve().parents[2]
NEW_TOKENS = 6


def greedy_answer(folder: Path, message: str) -> str:
    """The answer of ``folder``'s model to one user message, computed with transformers alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    ids = tok.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                  tokenize=True, return_dict=False)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    eos = {tok.eos_token_id, *([model.generation_config.eos_token_id] if isinstance(
        model.generation_config.eos_token_id, int) else model.generation_config.eos_token_id or [])} - {None}
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=sorted(eos), pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
    cut = next((i for i, t in enumerate(out) if t in eos), len(out))
    return tok.decode(out[:cut], skip_special_tokens=True)


@pytest.fixture(scope="module")
def steered(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(steered checkpoint, base model folder, env) for a tiny Llama GGUF steered toward "he"."""
    tmp = tmp_path_factory.mktemp("chat")
    env = {"STEERFORMER_CACHE": str(tmp / "cache")}
    gguf = write_tiny_chat_gguf(tmp / "tiny.gguf")
    res = run_cli(["steer", gguf, "--token", "he", "--layer", "1", "--out", tmp / "ckpt", "--quiet"], env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    base = next((tmp / "cache" / "gguf").glob("[0-9a-f]" * 64))
    return tmp / "ckpt", base, env


def spawn(args: list, env: dict):
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return pexpect.spawn(sys.executable, ["-c", "from steerformer_cli.main import app; app()", "chat", *map(str, args)],
                         env=full, encoding="utf-8", timeout=240, dimensions=(40, 200))


def ask(child, message: str) -> str:
    """Send one line; what the terminal showed until the next prompt ("\\r\\n" as "\\n")."""
    child.sendline(message)
    child.expect_exact("you> ")
    return child.before.replace("\r\n", "\n")


def test_chat_streams_base_and_steered_answers_and_strength_zero_is_the_base_model(steered) -> None:
    ckpt, base, env = steered
    expected_base, expected_steered = greedy_answer(base, "hello"), greedy_answer(ckpt, "hello")
    child = spawn([ckpt, "--compare", "--max-new-tokens", NEW_TOKENS, "--quiet"], env)
    child.expect_exact("you> ")
    shown = ask(child, "hello")
    assert f"base> {expected_base}\n" in shown and f"steered x1> {expected_steered}\n" in shown, shown
    assert shown.index("base> ") < shown.index("steered x1> ")

    assert "forgot: 'hello'" in ask(child, "/undo")
    assert "strength 0" in ask(child, "/strength 0")
    shown = ask(child, "hello")  # the edit undone in memory: the base model's own greedy answer, twice
    assert f"base> {expected_base}\n" in shown and f"steered x0> {expected_base}\n" in shown, shown

    bad = ask(child, "/strength lots")
    assert bad.count("error: ") == 1 and "/strength" in bad and "finite number" in bad
    assert ask(child, "/nope").count("error: ") == 1
    assert "strength 1" in ask(child, "/strength 1")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_saves_the_steered_checkpoint_and_refuses_a_scaled_one(steered, tmp_path) -> None:
    ckpt, _, env = steered
    child = spawn([ckpt, "--strength", "0.5", "--max-new-tokens", 2, "--quiet"], env)
    child.expect_exact("you> ")
    refused = ask(child, f"/save {tmp_path / 'half'}")
    assert refused.count("error: ") == 1 and "strength 1" in refused and not (tmp_path / "half").exists()
    ask(child, "/strength 1")
    assert "saved to" in ask(child, f"/save {tmp_path / 'again'}")
    assert ask(child, f"/save {ckpt}").count("error: ") == 1  # the output rules: never over its own input
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    from safetensors.torch import load_file

    a, b = load_file(str(ckpt / "model.safetensors")), load_file(str(tmp_path / "again" / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_chat_refuses_compare_on_a_folder_that_is_not_steered_before_loading(steered) -> None:
    _, base, env = steered
    res = run_cli(["chat", base, "--compare"], env=env)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].startswith("error: --compare")
