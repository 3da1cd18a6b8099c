"""`steerformer steer --out` reads what it needs once: the tokenizer is loaded one time and shared by
the steer and the saved folder (it was loaded once per step, ~0.15 s each on SmolLM2)."""

from __future__ import annotations

from tests.cli_process import run_cli_here
from tests.formats.gguf_sources import write_tiny_chat_gguf


def test_a_steer_with_out_loads_the_tokenizer_once(tmp_path, monkeypatch) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    gguf = write_tiny_chat_gguf(tmp_path / "tiny.gguf")
    loads: list = []
    load = AutoTokenizer.from_pretrained

    def counted(*args, **kwargs):
        if "gguf_file" not in kwargs:  # the GGUF's one conversion into the cache reads the GGUF's own tokenizer
            loads.append(args[0])
        return load(*args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", counted)
    res = run_cli_here(["steer", gguf, "--token", "he", "--layer", "1", "--out", tmp_path / "out", "--quiet"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    assert len(loads) == 1, loads
