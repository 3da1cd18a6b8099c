"""A GGUF model source is converted once into a cached safetensors folder keyed by the file's
sha256; a later load reads that folder after checking its manifest (stamps, hashes, the file list),
and a damaged entry is converted again, never read. A layer flag is checked from the GGUF header
before torch is imported or any tensor is read."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.formats.gguf_sources import write_tiny_chat_gguf

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gguf_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    return write_tiny_chat_gguf(tmp_path / "tiny.gguf")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_second_load_reads_the_cached_folder_without_converting_again(gguf_file, monkeypatch) -> None:
    from steerformer.gguf_source import converted_checkpoint

    folder = converted_checkpoint(gguf_file)
    assert folder.name == sha(gguf_file)  # keyed by the GGUF's own bytes
    weights = folder / "model.safetensors"
    before = (weights.stat().st_ino, weights.stat().st_mtime_ns)

    import transformers

    def no_conversion(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_conversion)
    assert converted_checkpoint(gguf_file) == folder
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == before


def test_cache_hit_parses_no_gguf_header_and_a_changed_file_does(gguf_file, monkeypatch) -> None:
    import steerformer.gguf_source as gguf_source

    folder = gguf_source.converted_checkpoint(gguf_file)
    parsed = []
    real = gguf_source.read_gguf_header
    monkeypatch.setattr(gguf_source, "read_gguf_header", lambda p: parsed.append(p) or real(p))
    assert gguf_source.converted_checkpoint(gguf_file) == folder and parsed == []  # the start's check read it
    gguf_file.write_bytes(gguf_file.read_bytes())  # the same bytes, a new stamp: hashed and parsed again
    assert gguf_source.converted_checkpoint(gguf_file) == folder and len(parsed) == 1


def flip_one_byte_keeping_mtime(path: Path) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # inside the last tensor's bytes: the header still parses
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back; the ctime cannot be


@pytest.mark.parametrize("damage", ["flipped weight byte, mtime restored", "extra file", "missing tokenizer",
                                    "manifest edited", "manifest of another GGUF"])
def test_damaged_cache_entry_is_detected_and_converted_again(gguf_file, damage, caplog) -> None:
    from steerformer.gguf_source import SOURCE_FILE, cache_entry_problem, converted_checkpoint

    folder = converted_checkpoint(gguf_file)
    good = {p.name: sha(p) for p in folder.iterdir() if p.name != SOURCE_FILE}
    manifest = json.loads((folder / SOURCE_FILE).read_text())
    if damage.startswith("flipped"):
        flip_one_byte_keeping_mtime(folder / "model.safetensors")
    elif damage == "extra file":
        (folder / "evil.py").write_text("print('hi')")
    elif damage == "missing tokenizer":
        (folder / "tokenizer.json").unlink()
    elif damage == "manifest edited":
        manifest["model_id"] = "someone/else"
        (folder / SOURCE_FILE).write_text(json.dumps(manifest))
    else:
        manifest["sha256"] = "0" * 64
        (folder / SOURCE_FILE).write_text(json.dumps(manifest))
    assert cache_entry_problem(folder, folder.name) is not None
    with caplog.at_level("WARNING"):
        assert converted_checkpoint(gguf_file) == folder
    assert "converting the GGUF again" in caplog.text
    assert {p.name: sha(p) for p in folder.iterdir() if p.name != SOURCE_FILE} == good  # rebuilt as before
    assert cache_entry_problem(folder, folder.name) is None


def test_a_touched_but_unchanged_file_is_rehashed_and_trusted(gguf_file) -> None:
    from steerformer.gguf_source import cache_entry_problem, converted_checkpoint

    folder = converted_checkpoint(gguf_file)
    os.utime(folder / "config.json")  # a new stamp, the same bytes
    assert cache_entry_problem(folder, folder.name) is None


def test_out_of_range_layer_of_a_gguf_is_refused_from_the_header_before_torch(gguf_file, tmp_path) -> None:
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules))\n"
            "from steerformer_cli.main import app\napp()\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "STEERFORMER_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code, "steer", str(gguf_file), "--token", "ocean", "--layer", "99"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == \
        "error: --layer=99 is invalid: expected layer indices in [-3, 2] (the model has 3 layers)."
    assert "torch imported: False" in res.stdout
    assert not (tmp_path / "cache" / "gguf").exists() or not any(
        p.is_dir() for p in (tmp_path / "cache" / "gguf").iterdir())  # nothing converted


def test_conversion_draws_no_bar_while_progress_bars_are_off(gguf_file, capfd) -> None:
    from transformers.utils import logging as hf_logging

    from steerformer.gguf_source import converted_checkpoint

    hf_logging.disable_progress_bar()  # what --quiet does (cli/_common.library_bars)
    try:
        converted_checkpoint(gguf_file)
    finally:
        hf_logging.enable_progress_bar()
    err = capfd.readouterr().err
    assert "Converting and de-quantizing" not in err and "Loading weights" not in err, err


TWO_LOADERS = """
import os, sys
from pathlib import Path
import steerformer.gguf_source as gguf_source
real = gguf_source._convert
def counted(path, folder, model_id):
    Path(os.environ["CONVERSIONS"], f"converted-by-{os.getpid()}").touch()
    real(path, folder, model_id)
gguf_source._convert = counted
print("ready", flush=True)
sys.stdin.readline()  # both processes start loading at the same moment
print(gguf_source.converted_checkpoint(Path(sys.argv[1])), flush=True)
"""


def test_two_processes_loading_one_new_gguf_at_once_convert_it_once_and_read_the_same_entry(gguf_file, tmp_path) -> None:
    """Two test workers (or two terminals) sharing one cache: one converts, the other waits on the
    entry's writer lock and reads it; no temporary, lock file or second copy is left."""
    from steerformer.gguf_source import cache_entry_problem

    marks = tmp_path / "conversions"
    marks.mkdir()
    env = {**os.environ, "CONVERSIONS": str(marks), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", TWO_LOADERS, str(gguf_file)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()[-2000:]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    folders = {Path(out.strip().splitlines()[-1]) for out, _ in outs}
    assert len(folders) == 1 and len(list(marks.iterdir())) == 1  # one conversion, one entry for both
    folder = folders.pop()
    assert folder.name == sha(gguf_file) and cache_entry_problem(folder, folder.name) is None
    cache = Path(os.environ["STEERFORMER_CACHE"])
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == sorted([folder.name, "hashes.json"])
    assert not any((cache / "locks").iterdir())  # each lock file removed by the holder that made it
