"""Headless Debian chromium for the browser tests: screenshots, and a page driven over the DevTools pipe."""

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

WINDOW = (1280, 800)
# No first-run dialogs, no network of its own (updates, sync, QUIC), no GPU, no sandbox (root in CI).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}"]


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def png_size(path):
    """(width, height) from a PNG's header, or None if the file is not a PNG."""
    header = Path(path).read_bytes()[:24]
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def chromium():
    """The path of Debian's chromium; without it the test skips with the reason, or fails when CI=true."""
    path = shutil.which("chromium")
    if path is None:
        reason = "Debian's chromium is not installed (bash scripts/setup.sh test installs it as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the browser tests")
        pytest.skip(reason)
    return path


def screenshot(url, path, budget_ms=30_000, timeout_s=180):
    """Save a WINDOW-sized PNG of ``url`` once the page settled (at most ``budget_ms`` of page time)."""
    with tempfile.TemporaryDirectory() as profile:
        command = [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--screenshot={path}",
                   f"--virtual-time-budget={budget_ms}", url]
        subprocess.run(command, capture_output=True, timeout=timeout_s, check=True)


class Page:
    """One tab of a headless chromium, driven through the DevTools protocol on a pipe; every wait is bounded.

    Example:
        >>> with Page() as page:  # doctest: +SKIP
        ...     page.open("http://127.0.0.1:8000/")
        ...     page.evaluate("document.title")
    """

    def __init__(self, timeout_s=60):
        path = chromium()
        self.timeout_s, self._next_id, self._buffer = timeout_s, 0, b""
        self._profile = tempfile.TemporaryDirectory()
        commands, self._to_browser = os.pipe()
        self._from_browser, replies = os.pipe()
        # The protocol's pipe is the browser's file descriptors 3 (it reads) and 4 (it writes); the
        # shell (bash: sh takes single digits only) moves ours there from above 9, out of their way.
        ends = [fcntl.fcntl(end, fcntl.F_DUPFD, 10) for end in (commands, replies)]
        self._process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]}', path, *FLAGS,
             f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=ends, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        for end in (commands, replies, *ends):
            os.close(end)
        try:
            target = self._call("Target.createTarget", url="about:blank")["targetId"]
            self._tab = self._call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        os.killpg(self._process.pid, signal.SIGKILL)  # the browser and the processes it started
        self._process.wait(timeout=30)
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._profile.cleanup()

    def open(self, url):
        """Load ``url`` and wait until the new page and its images have loaded (a redirect may follow)."""
        self.evaluate("window.previousPage = true")  # gone once the new page replaced this one
        self._call("Page.navigate", url=url)
        self.wait_for("window.previousPage === undefined && document.readyState === 'complete'")

    def set_viewport(self, width, height, mobile=False):
        """Lay pages out as on a window of ``width`` x ``height`` CSS pixels (a phone's when ``mobile``)."""
        self._call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                   mobile=mobile)

    def disable_scripts(self):
        """Run no JavaScript in the pages opened from now on, as in a browser with scripts turned off."""
        self._call("Emulation.setScriptExecutionDisabled", value=True)

    def click(self, selector):
        """Click the middle of the first element ``selector`` matches with the mouse, as a reader would."""
        box = self.evaluate(f"(() => {{ const box = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [box.x + box.width / 2, box.y + box.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self._call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def save_screenshot(self, path):
        """Save what the window shows now as a PNG."""
        Path(path).write_bytes(base64.b64decode(self._call("Page.captureScreenshot", format="png")["data"]))

    def wait_for(self, expression):
        """Wait until the JavaScript ``expression`` is true in the page; fail after ``timeout_s``.

        While a page is being replaced the expression cannot run; that counts as not true yet.
        """
        deadline = time.monotonic() + self.timeout_s
        while not self._send("Runtime.evaluate", expression=expression, returnByValue=True).get(
                "result", {}).get("result", {}).get("value"):
            assert time.monotonic() < deadline, f"never true within {self.timeout_s} s: {expression}"
            time.sleep(0.2)

    def evaluate(self, expression):
        """The JSON value of the JavaScript ``expression`` in the page (promises awaited)."""
        reply = self._call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in reply, f"{expression}: {reply['exceptionDetails']}"
        return reply["result"].get("value")

    def _call(self, method, **params):
        reply = self._send(method, **params)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply["result"]

    def _send(self, method, **params):
        """Send one command; return its reply (``result`` or ``error``), skipping the events in between."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if method not in ("Target.createTarget", "Target.attachToTarget"):
            message["sessionId"] = self._tab
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                return reply

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._from_browser], [], [], left)[0], \
                f"chromium did not answer within {self.timeout_s} s"
            chunk = os.read(self._from_browser, 1 << 16)
            assert chunk, f"chromium closed its DevTools pipe (status {self._process.poll()})"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)
