"""Headless Chromium for the tests of labctl's HTML pages: console errors, requests, the DOM.

A test module's Chromium, started once for the module, yields from `open_browser`: it skips
where Chromium is missing, and fails under CI=true, where `.ci/run` installs it. Each test's
`browser` fixture opens a new tab in it (`Browser.new_tab`), seeing that tab's events alone.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class Browser:
    """Headless Chromium driven over the DevTools protocol: console messages, log entries,
    requests, and what the page's own DOM says once loaded."""

    def __init__(self, profile: Path, env: dict[str, str] | None = None):
        import websocket

        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "--remote-allow-origins=*", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=None if env is None else {**os.environ, **env},
        )  # fmt: skip
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            url = found.group(1) if found else None
        assert url, "Chromium did not start its DevTools endpoint"
        # websocket-client checks UTF-8 a character at a time in Python: 5 s of CPU for the
        # screenshot's 10 MB of base64; json.loads below refuses what is not text anyway.
        self.ws = websocket.create_connection(
            url, timeout=60, suppress_origin=True, skip_utf8_validation=True
        )
        self.next_id = 0
        self.events: list[dict] = []
        self.target = self.session = None
        self.new_tab()

    def new_tab(self) -> None:
        """A fresh tab in place of the last one, its events alone seen: a test's own page in
        a browser started once for its module (a start is a second of CPU)."""
        if self.target is not None:
            self.send("Target.closeTarget", targetId=self.target)
        self.target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=self.target, flatten=True)[
            "sessionId"
        ]
        self.events = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=True)

    def send(self, method: str, session: bool = False, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply.get("result", {})
            self._event(reply)

    def _event(self, event: dict) -> None:
        """Kept when it is this tab's: a closed tab's last events may still arrive."""
        if event.get("sessionId") == self.session:
            self.events.append(event)

    def load(self, url: str) -> None:
        self.send("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, "the page did not finish loading"
            self._event(json.loads(self.ws.recv()))

    def evaluate(self, expression: str):
        result = self.send(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True
        )
        return result["result"]["value"]

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        """Every URL the page asked for other than itself and data: URLs."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
            and not e["params"]["request"]["url"].startswith(("data:", "file:"))
        ]

    def fonts_ready(self) -> None:
        """Wait until the page's fonts are loaded (an embedded font is decoded apart)."""
        self.send(
            "Runtime.evaluate", session=True, expression="document.fonts.ready.then(() => 1)",
            awaitPromise=True, returnByValue=True,
        )  # fmt: skip

    def pixels(self, selector: str, index: int = 0) -> bytes:
        """The screenshot (PNG) of one element, as drawn."""
        box = json.loads(self.evaluate(
            f"JSON.stringify(document.querySelectorAll({json.dumps(selector)})[{index}]"
            ".getBoundingClientRect())"
        ))  # fmt: skip
        clip = {k: box[k] for k in ("x", "y", "width", "height")} | {"scale": 1}
        clip["y"] += self.evaluate("window.scrollY")
        data = self.send("Page.captureScreenshot", session=True, clip=clip,
                         captureBeyondViewport=True)  # fmt: skip
        return base64.b64decode(data["data"])

    def screenshot(self, path: Path) -> Path:
        # the whole page is ~90 million pixels: encoded for speed, 2 s of Chromium's CPU less
        data = self.send(
            "Page.captureScreenshot",
            session=True,
            captureBeyondViewport=True,
            optimizeForSpeed=True,
        )
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def open_browser(tmp_path: Path, env: dict[str, str] | None = None):
    """A started Browser (with `env` added to its environment), closed when the test is done
    (a fixture's body)."""
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is not installed: .ci/run installs the distribution's package")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    pytest.importorskip("websocket", reason="pip install 'labctl[dev]' (websocket-client)")
    # Chromium leaves its singleton folder (`org.chromium.Chromium.*`) in TMPDIR when it is
    # stopped: a folder of its own, removed here, not one more in the machine's /tmp each run.
    # A short path: the singleton's Unix socket in tmp_path would pass the 108-byte limit.
    scratch = tempfile.mkdtemp(prefix="labctl-chromium-")
    try:
        opened = Browser(tmp_path / "profile", {"TMPDIR": scratch, **(env or {})})
        try:
            yield opened
        finally:
            opened.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
