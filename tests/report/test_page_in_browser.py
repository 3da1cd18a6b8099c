"""The report pages in a real headless Chromium (tests/report/browser.py): each loads with no console
error, the strength slider, moved by key presses, shows the answers of the strength it names, a
screenshot is taken, and the page asks the network for nothing — checked on the page with its
Content-Security-Policy removed, so the check does not rest on the policy (and a control page with
one remote image shows that a request would be seen)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from steerformer.report import write_report

from .browser import HOW_TO_GET_IT, Browser, chromium_path
from .pages import SECTION, analyze_folder, evaluation_folder, steer_folder


@pytest.fixture(scope="module")
def browser():
    binary = chromium_path()
    if binary is None:
        pytest.skip(HOW_TO_GET_IT)
    b = Browser(binary)
    yield b
    b.close()


VISIBLE_STEERED = ("[...document.querySelectorAll('.ans.steered')].filter(e => !e.hidden)"
                   ".map(e => e.querySelector('.text').textContent)")
NOW = "[...document.querySelectorAll('.now')].filter(e => !e.hidden).map(e => e.textContent)"


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_steering_page_loads_clean_and_the_slider_shows_each_strengths_answers(browser, tmp_path) -> None:
    folder, record = steer_folder(tmp_path / "steer")
    page = write_report(folder, section=SECTION)
    browser.open(page)
    assert browser.errors() == []
    dose = record["evaluation"]["dose"]  # scales 0, 0.5, 1, 2: the steer (1) is shown first
    assert browser.js("document.getElementById('strength').value") == "2"
    assert browser.js(VISIBLE_STEERED) == dose[2]["answers"]
    browser.js("document.getElementById('strength').focus()")
    browser.press("ArrowRight", "ArrowRight", 39)
    assert browser.js("document.getElementById('strength').value") == "3"
    assert browser.js(VISIBLE_STEERED) == dose[3]["answers"]  # twice the strength: other answers
    assert "2 × the chosen strength" in browser.js(NOW)[0]
    for _ in range(3):
        browser.press("ArrowLeft", "ArrowLeft", 37)
    assert browser.js(VISIBLE_STEERED) == dose[0]["answers"]  # strength 0: the base model's own answers
    # the concept's words are marked in the answers shown, each whole word only
    assert browser.js("[...document.querySelectorAll('.ans.steered:not([hidden]) mark')].length") == 0
    browser.press("ArrowRight", "ArrowRight", 39)
    assert browser.js("[...document.querySelectorAll('.ans.steered:not([hidden]) mark')]"
                      ".map(e => e.textContent)") == ["Ocean", "waves"]
    assert browser.errors() == []
    # the method's own section: its table, one row per scanned layer under its header
    rows = browser.js("[...document.querySelectorAll('section')].find(s => s.textContent.includes("
                      "'Layer scan')).querySelectorAll('tr').length")
    assert rows == 1 + len(SECTION["table"]["rows"])
    assert is_png(browser.screenshot(tmp_path / "steer.png"))


def test_analyze_page_loads_clean_with_its_verdict_and_figures(browser, tmp_path) -> None:
    page = write_report(analyze_folder(tmp_path / "analyze"))
    browser.open(page)
    assert browser.errors() == []
    assert "1 of them beyond chance" in browser.js("document.querySelector('.verdict').textContent")
    # both inline figures decoded (a broken data: URI has naturalWidth 0)
    assert browser.js("[...document.images].map(i => i.naturalWidth)") == [40, 40]
    assert is_png(browser.screenshot(tmp_path / "analyze.png"))


def test_evaluation_page_slider_runs_over_the_variants_by_kl(browser, tmp_path) -> None:
    folder, doc = evaluation_folder(tmp_path / "evaluate")
    browser.open(write_report(folder))
    assert browser.errors() == []
    by_kl = sorted(doc["points"], key=lambda p: p["kl"])
    browser.js("document.getElementById('strength').focus()")
    browser.press("Home", "Home", 36)
    assert browser.js(VISIBLE_STEERED) == doc["base_answers"]
    browser.press("ArrowRight", "ArrowRight", 39)
    assert browser.js(VISIBLE_STEERED) == by_kl[0]["answers"]


def test_page_requests_nothing_from_the_network(browser, tmp_path) -> None:
    folder, _ = steer_folder(tmp_path / "steer", answer_extra=' see <img src="http://127.0.0.1:9/a.png"> '
                                                            "https://example.com/x.js")
    page = write_report(folder)
    text = page.read_text()
    open_page = tmp_path / "no-policy.html"  # the policy removed: nothing may rely on it
    open_page.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text))
    assert "Content-Security-Policy" not in open_page.read_text()
    browser.open(open_page)
    assert browser.requests() == [open_page.resolve().as_uri()]
    assert browser.errors() == []
    # control: one remote image in the same page is seen as a request (the check can fail)
    control = tmp_path / "control.html"
    control.write_text(open_page.read_text().replace("</main>", '<img src="http://127.0.0.1:9/probe.png"></main>'))
    browser.open(control)
    assert "http://127.0.0.1:9/probe.png" in browser.requests() and browser.blocked() == {}
    # and the page as written: its policy forbids that same image (reported as an error, never fetched)
    policed = tmp_path / "policed.html"
    policed.write_text(text.replace("</main>", '<img src="http://127.0.0.1:9/probe.png"></main>'))
    browser.open(policed)
    assert browser.blocked() == {"http://127.0.0.1:9/probe.png": "csp"}
    assert any("Content Security Policy" in e for e in browser.errors())


def test_record_page_without_a_dose_curve_slides_between_base_and_steer(browser, tmp_path) -> None:
    folder, record = steer_folder(tmp_path / "steer", dose=False)
    browser.open(write_report(folder))
    assert browser.errors() == []
    assert browser.js("document.getElementById('strength').max") == "1"
    assert browser.js(VISIBLE_STEERED) == record["evaluation"]["answers"]
    assert json.loads(json.dumps(browser.js(NOW)))[0].startswith("the steer")
