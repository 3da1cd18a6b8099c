"""README.md says what the code does: its command list is the CLI's, every command it shows exists,
every snippet's imports run, and every ``sf.`` name it uses resolves (issue 26: it listed 9 of 11
commands, taught a private import and promised a GGUF export ``sf.`` did not reach)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> set[str]:
    from typer.main import get_command

    from steerformer_cli.main import app

    return set(get_command(app).commands)


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def _code() -> list[str]:
    """Every piece of code on the page: inline spans and the lines of every fenced block."""
    fenced = re.findall(r"```\w*\n(.*?)```", README, re.S)
    prose = re.sub(r"```\w*\n.*?```", "", README, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose) + [ln for block in fenced for ln in block.splitlines()]


def test_the_command_list_is_the_cli_s() -> None:
    listed = re.search(r"`steerformer --help` lists\s+every command \(([^)]*)\)", README)
    assert listed, "README lost the sentence that lists the commands"
    names = re.findall(r"`([\w-]+)`", listed.group(1))
    assert len(names) == len(set(names))
    assert set(names) == _commands()


def test_every_command_the_page_shows_exists() -> None:
    commands = _commands()
    shown = {m for piece in _code() if "import steerformer" not in piece
             for m in re.findall(r"(?:^|\$ |\s)steerformer ([a-z][\w-]*)", piece)}
    assert {"analyze", "steer", "export"} <= shown  # the page does show commands
    assert not shown - commands, sorted(shown - commands)


def test_every_python_snippet_s_imports_run() -> None:
    """The import lines of each ```python block, in a fresh interpreter (the calls themselves load
    models: the snippets are run by hand and by scripts/demo.sh)."""
    blocks = _blocks("python")
    assert len(blocks) >= 2
    for block in blocks:
        imports = [ln for ln in block.splitlines() if re.match(r"(import|from) \w", ln)]
        assert imports, block
        done = subprocess.run([sys.executable, "-c", "\n".join(imports)], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]


def test_every_sf_name_the_page_uses_resolves() -> None:
    """``sf.steer``, ``sf.steering.evaluate_record``, ``sf.formats.write_gguf_model``, ...: in the snippets
    and in the prose, each resolves on the package (lazily: resolving imports the module, not a model)."""
    import steerformer as sf

    names = sorted({m for piece in _code() for m in re.findall(r"\bsf\.([A-Za-z_][\w.]*[A-Za-z_0-9])", piece)})
    assert {"steer", "formats.write_gguf_model", "load_tokenizer"} <= set(names)
    for name in names:
        obj = sf
        for part in name.split("."):
            assert hasattr(obj, part), f"sf.{name}: no {part!r}"
            obj = getattr(obj, part)
            if not isinstance(obj, type(sf)):  # attributes of a returned object are not the package's to check
                break


def test_the_page_imports_nothing_private() -> None:
    """What README teaches comes from ``steerformer`` or a subpackage's ``__all__``, never from a module
    inside it (``steerformer.loading`` is one)."""
    imports = [ln for block in _blocks("python") for ln in block.splitlines() if ln.startswith("from steerformer")]
    assert all(re.match(r"from steerformer(\.(steering|stats|formats|ode|collapse|sweep|adapters))? import ", ln)
               for ln in imports), imports
