"""`steerformer report DIR` and the page `analyze` writes: the analyze page carries the verdict of
report.json and every figure inline, `report DIR` renders the same page again from the folder, and
a folder that is not an output of steer, evaluate or analyze — or a report.html steerformer did not
write — is one error line naming FOLDER, exit 2, nothing changed."""

from __future__ import annotations

import base64
import html
import json
import re

import pytest

from tests.conftest import run_cli
from tests.models import saved_model


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    model = saved_model(tmp_path_factory.mktemp("albert"), "albert")
    out = tmp_path_factory.mktemp("runs") / "albert"
    res = run_cli(["analyze", model, "--out", out, "--n-prompts", "8", "--n-tokens", "4", "--null-draws", "5",
                   "--seed", "3"])
    assert res.exit_code == 0, res.output
    return out


def test_analyze_writes_one_page_with_its_verdict_and_every_figure_inline(analyzed) -> None:
    page = (analyzed / "report.html").read_text()
    summary = json.loads((analyzed / "report.json").read_text())["power_method"]["controlled"]["summary"]
    assert f"<p class=verdict>{html.escape(summary)}</p>" in page
    inline = [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]
    on_disk = {p.read_bytes() for p in analyzed.glob("*.png")}
    assert len(inline) == len(on_disk) >= 5 and set(inline) == on_disk
    assert not re.search(r"(src|href)=\"(https?:|//)", page)
    assert len(page.encode()) < 4 << 20  # every figure inline, still a few MB at most


def test_report_renders_the_same_page_again(analyzed, tmp_path) -> None:
    first = (analyzed / "report.html").read_bytes()
    res = run_cli(["report", analyzed])
    assert res.exit_code == 0 and "report.html" in res.output
    assert (analyzed / "report.html").read_bytes() == first


@pytest.mark.parametrize("make", ["missing", "foreign", "not-ours"])
def test_a_folder_that_is_no_output_is_one_line_and_exit_2(make, analyzed, tmp_path) -> None:
    folder = tmp_path / "x"
    if make == "foreign":
        folder.mkdir()
        (folder / "notes.txt").write_text("mine")
    if make == "not-ours":  # an analyze folder whose report.html someone else wrote
        import shutil

        shutil.copytree(analyzed, folder)
        (folder / "report.html").write_text("<html>my own page</html>")
    res = run_cli(["report", folder])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: FOLDER=") and str(folder) in lines[0]
    if make == "not-ours":
        assert (folder / "report.html").read_text() == "<html>my own page</html>"
