"""Headless Debian chromium driven over the DevTools protocol on a pipe (no extra package, no port).

`--remote-debugging-pipe` makes chromium read protocol messages from fd 3 and write them to fd 4, each a
JSON object ended by a NUL byte. This is enough to open a page, evaluate expressions in it while it keeps
running (a live page is watched without a reload), and take screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")


class BrowserError(RuntimeError):
    pass


# Deadlines, not expectations: a browser that answers at all answers within them. On a loaded 2-core CI
# machine chromium's first answer once took over 30 s (another chromium was starting beside it), and a
# test must not fail by how busy the machine is.
CALL_DEADLINE_S = 180.0


class Browser:
    """One headless chromium with one page (tab)."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        if CHROMIUM is None:
            raise BrowserError("chromium is not installed (scripts/setup.sh --system)")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child, before exec: the pipe ends become fds 3 and 4
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=wire,
            pass_fds=(3, 4),  # keep the fds wire() made; chromium's own stdio goes to DEVNULL
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable"):
            self.send(domain)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cv:
                    self._replies[-1] = {"error": {"message": "chromium closed the pipe"}}
                    self._cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                message = json.loads(raw)
                with self._cv:
                    if "id" in message:
                        self._replies[message["id"]] = message
                    else:
                        self.events.append(message)
                    self._cv.notify_all()

    def call(
        self, method: str, *, session: str | None = None, timeout_s: float = CALL_DEADLINE_S, **params: Any
    ) -> Any:
        """Send one command and wait for its result (BrowserError on a protocol error)."""
        self._next_id += 1
        mid = self._next_id
        message: dict[str, Any] = {"id": mid, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while mid not in self._replies and -1 not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"{method}: no answer in {timeout_s:g}s")
                self._cv.wait(left)
            reply = self._replies.pop(mid, None) or self._replies[-1]
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def send(self, method: str, **params: Any) -> Any:
        """A command to the page's session."""
        return self.call(method, session=self.session, **params)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def open(self, url: str, timeout_s: float = CALL_DEADLINE_S) -> None:
        """Navigate and wait until the page and its images have loaded."""
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", timeout_s)

    def wait_for(self, expression: str, timeout_s: float = CALL_DEADLINE_S, interval_s: float = 0.1) -> Any:
        """Poll ``expression`` until it is truthy; BrowserError at the deadline."""
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval_s)
        raise BrowserError(f"timed out after {timeout_s:g}s waiting for {expression} (last: {value!r})")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the viewport)."""
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def dialogs(self) -> list[dict[str, Any]]:
        """Every alert/confirm/prompt the page tried to open."""
        return [e for e in self.events if e.get("method") == "Page.javascriptDialogOpening"]

    def close(self) -> None:
        with contextlib.suppress(BrowserError):
            self.call("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)
