"""A real headless browser for the page tests: Debian's ``chromium`` driven over the DevTools protocol
through ``--remote-debugging-pipe`` (file descriptors 3 and 4, NUL-separated JSON), so no port is
opened and no Python browser package (which would download its own browser) is needed."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

#: The line a test prints when it skips for want of a browser.
HOW_TO_GET_IT = ("no chromium on PATH: the page tests need a headless Chromium (Debian/Ubuntu: apt-get install -y "
                 "chromium; scripts/test.sh installs it when run as root; elsewhere set STEERFORMER_CHROMIUM=/path)")


def chromium_path() -> str | None:
    """The browser to drive: ``$STEERFORMER_CHROMIUM``, else chromium / chromium-browser / google-chrome on PATH."""
    env = os.environ.get("STEERFORMER_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Browser:
    """One headless Chromium and one page in it. ``events`` collects every protocol event of the
    page's session (console messages, exceptions, log entries, network requests)."""

    def __init__(self, binary: str, *, timeout: float = 20.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="steerformer-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's pipes at 3 (commands in) and 4 (replies out)
            r, w = os.dup(to_child_r), os.dup(from_child_w)  # above 4: the dup2s cannot clobber each other
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
             f"--user-data-dir={self.profile}", "--window-size=1280,1600", "about:blank"],
            close_fds=False, preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # close_fds=False: subprocess would otherwise close 3 and 4 after preexec_fn made them
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    # ---- the protocol -----------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = False, **params) -> dict:
        """Send one command (to the page's session when ``session``) and return its result."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        """The next event named ``method`` (already received ones first)."""
        for i, e in enumerate(self.events):
            if e["method"] == method:
                return self.events.pop(i)
        deadline = time.monotonic() + self.timeout
        while True:
            e = self._read_message(deadline)
            if e.get("method") == method:
                return e
            if "method" in e:
                self.events.append(e)

    # ---- what the tests do ----------------------------------------------------------------------
    def open(self, path: Path) -> None:
        """Load the page at ``path`` and wait for its load event (every inline image decoded)."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=Path(path).resolve().as_uri())
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", session=True, expression="1", awaitPromise=True)  # flush pending events

    def js(self, expression: str):
        """The value of ``expression`` in the page (a JSON-able value)."""
        res = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def press(self, key: str, code: str, key_code: int) -> None:
        """A real key press (down and up) on the focused element."""
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", session=True, type=kind, key=key, code=code,
                      windowsVirtualKeyCode=key_code, nativeVirtualKeyCode=key_code)

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        """A PNG of the page (the whole page when ``full_page``)."""
        params: dict = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                            "height": min(size["height"], 12000), "scale": 1})
        data = self.call("Page.captureScreenshot", session=True, **params)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (a CSP violation is one) so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("text")))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        """The URL of every request the page made so far."""
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def blocked(self) -> dict[str, str]:
        """URL → why the browser refused to send it (e.g. "csp"), for requests it did not make."""
        urls = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"}
        return {urls.get(e["params"]["requestId"], "?"): e["params"]["blockedReason"] for e in self.events
                if e["method"] == "Network.loadingFailed" and e["params"].get("blockedReason")}

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self.profile, ignore_errors=True)
