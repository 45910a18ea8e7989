"""Headless Chromium driven over the DevTools protocol on a pipe: pages checked as people see them.

The one browser driver of the suite (the view page's tests and the docs site's use it). One
browser per test module (``Browser`` is a context manager); no port is opened: Chromium reads
commands on fd 3 and answers on fd 4 (``--remote-debugging-pipe``), messages ending in a NUL
byte. Needs Debian's ``chromium`` package (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _pipe_fds(reads: int, writes: int) -> None:
    """In the child: the pipe's ends as fds 3 and 4, moved clear of them first."""
    reads, writes = fcntl.fcntl(reads, fcntl.F_DUPFD, 10), fcntl.fcntl(writes, fcntl.F_DUPFD, 10)
    os.dup2(reads, 3)
    os.dup2(writes, 4)


class Browser:
    """One headless Chromium and one page (tab) in it, with a timeout on every command."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="test-browser-")
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict] = []
        self._process: subprocess.Popen[bytes] | None = None
        self.session: str | None = None

    def __enter__(self) -> Browser:
        executable = chromium_path()
        if executable is None:
            raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # Chromium reads fd 3 and writes fd 4 (pass_fds keeps them, dup2 puts them there).
        self._process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={self._profile.name}",
                "--remote-debugging-pipe",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=lambda: _pipe_fds(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._write = to_browser_w
        self._read = from_browser_r
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            with contextlib.suppress(Exception):
                self.call("Browser.close")
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for fd in (self._write, self._read):
            os.close(fd)
        self._profile.cleanup()

    # -- the protocol --------------------------------------------------------------------------

    def call(self, method: str, session: bool = False, **params: Any) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        return self._call(method, session, params, self.timeout)

    def _call(self, method: str, session: bool, params: dict[str, Any], timeout: float) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(index)
            self._events.append(self._receive(deadline))

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            with selectors.DefaultSelector() as selector:
                selector.register(self._read, selectors.EVENT_READ)
                if not selector.select(left):
                    continue
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    # -- what tests use ------------------------------------------------------------------------

    def open(self, url: str, width: int = 1280, height: int = 1000) -> float:
        """Load ``url`` in the page; the seconds until its load event."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        # From a blank page: a URL that differs only in its fragment would not load again.
        self._events.clear()
        self.call("Page.navigate", session=True, url="about:blank")
        self.wait_event("Page.loadEventFired")
        self._events.clear()
        start = time.perf_counter()
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")
        return time.perf_counter() - start

    def js(self, expression: str, timeout: float | None = None) -> Any:
        """The value of a JavaScript expression in the page (JSON-able; a promise is awaited)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        result = self._call("Runtime.evaluate", True, params, timeout or self.timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def until(self, condition: str, timeout: float = 30.0) -> Any:
        """Wait for a JavaScript expression to be truthy (checked every 100 ms); its value.

        The page does the polling, so a page that changes on its own (a search index loading
        in a worker) is watched without a round trip per check.
        """
        return self.js(
            f"""new Promise((resolve, reject) => {{
                const start = Date.now();
                const tick = () => {{
                    let value; try {{ value = ({condition}); }} catch (e) {{ value = null; }}
                    if (value) return resolve(value);
                    if (Date.now() - start > {timeout * 1000})
                        return reject(new Error("timed out: " + {json.dumps(condition)}));
                    setTimeout(tick, 100);
                }};
                tick();
            }})""",
            timeout=timeout + self.timeout,
        )

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", session=True, **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
