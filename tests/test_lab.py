"""Tests for `make lab`: JupyterLab serves the lessons with the project's kernel; a browser opens one."""

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import browser

ROOT = Path(__file__).resolve().parent.parent
KERNEL_NAME, KERNEL_DISPLAY_NAME = "kerasdist", "Python (kerasdist)"
LESSON = "01_quickstart.ipynb"


def _get_json(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def _lines(stream):
    """A queue fed with the stream's lines by a daemon thread (reads never block the test)."""
    lines = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.fixture
def lab_server(tmp_path):
    """`make lab` on a free loopback port; yields (base URL, token, output so far); stopped afterwards."""
    if not (ROOT / ".venv" / "bin" / "jupyter-lab").exists():
        pytest.skip("JupyterLab is not in .venv (bash scripts/setup.sh test installs the notebooks extra)")
    port = browser.free_port()
    environment = {key: value for key, value in os.environ.items() if key != "JUPYTER_TOKEN"}
    environment.update(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), KERASDIST_KERNEL="env")
    server = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_ARGS=--port={port} --ServerApp.port_retries=0 --no-browser"],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    lines, output = _lines(server.stdout), []
    printed = re.compile(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)")
    deadline = time.monotonic() + 180
    match = None
    try:
        while match is None and time.monotonic() < deadline and server.poll() is None:
            try:
                output.append(lines.get(timeout=1))
                match = printed.search(output[-1])
            except queue.Empty:
                continue
        assert match, f"make lab printed no URL in 180 s (status {server.poll()}):\n{''.join(output)[-2000:]}"
        # Jupyter prints the URL just before it starts listening: poll its status API, bounded.
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                _get_json(f"{base}/api/status?token={match.group(1)}", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "JupyterLab never answered"
                time.sleep(0.5)
        yield base, match.group(1), output
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # Jupyter shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def test_lessons_ask_for_the_kernel_make_lab_registers():
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        kernelspec = json.loads(notebook.read_text())["metadata"]["kernelspec"]
        assert (kernelspec["name"], kernelspec["display_name"]) == (KERNEL_NAME, KERNEL_DISPLAY_NAME)
    registration = f'--name {KERNEL_NAME} --display-name "{KERNEL_DISPLAY_NAME}"'
    assert registration in (ROOT / "scripts" / "lab.sh").read_text()


def test_make_lab_rejects_an_unknown_kernel_place():
    done = subprocess.run(["bash", "scripts/lab.sh"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, KERASDIST_KERNEL="global"))
    assert done.returncode == 2
    assert done.stderr.startswith("kerasdist: error: KERASDIST_KERNEL must be env or user. Received: "
                                  "KERASDIST_KERNEL=global;")
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


@pytest.mark.slow
def test_make_lab_serves_the_lessons_and_a_browser_opens_one(lab_server, tmp_path):
    base, token, _ = lab_server
    # The lessons' listing, over loopback, through Jupyter's contents API.
    listing = _get_json(f"{base}/api/contents/?token={token}")
    served = {item["name"] for item in listing["content"]}
    lessons = {path.name for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert len(lessons) >= 13 and lessons <= served
    # The kernel the lessons ask for is registered inside the project's .venv.
    spec = _get_json(f"{base}/api/kernelspecs?token={token}")["kernelspecs"][KERNEL_NAME]["spec"]
    assert spec["display_name"] == KERNEL_DISPLAY_NAME
    assert Path(spec["argv"][0]).parent.samefile(ROOT / ".venv" / "bin")

    screenshot = tmp_path / "lesson.png"
    browser.screenshot(f"{base}/lab/tree/{LESSON}?token={token}", screenshot)
    assert browser.png_size(screenshot) == browser.WINDOW
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one (a blank PNG is ~5 kB)
    # Opening the lesson started a kernel for it: the kernel the lesson asks for.
    sessions = _get_json(f"{base}/api/sessions?token={token}")
    assert [session["kernel"]["name"] for session in sessions if session["path"] == LESSON] == [KERNEL_NAME]
