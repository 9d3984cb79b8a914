"""Draw docs/figures/checked_exercise.png: a checked exercise as a student sees it in JupyterLab.

A small notebook answers lesson 01's q1 wrongly, asks for a hint, then answers it right; it is executed,
opened in JupyterLab (its own settings, loopback, a token) and shot by headless chromium at 1280x800.

    .venv/bin/python scripts/screenshot_check.py [OUT.png]
"""

import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import browser  # noqa: E402  (tests/browser.py: Debian chromium, headless)
from conftest import user_state_environment  # noqa: E402

CELLS = [
    ("markdown", "### Exercise q1: the per-replica batch\n\nWrite `per_replica_batch(global_batch, "
                 "num_replicas)` that returns how many examples of one global batch each replica gets."),
    ("code", "from kerasdist.course.exercises.lesson01 import q1\n\n"
             "def per_replica_batch(global_batch, num_replicas):\n    return global_batch / num_replicas\n\n"
             "q1.check()"),
    ("code", "q1.hint(2)"),
    ("code", "def per_replica_batch(global_batch, num_replicas):\n    return global_batch // num_replicas\n\n"
             "q1.check()"),
]


def main(out=ROOT / "docs" / "figures" / "checked_exercise.png"):
    with tempfile.TemporaryDirectory(prefix="kerasdist-screenshot-") as work:
        work = Path(work)
        environment = dict(os.environ, **user_state_environment(str(work / "state")))
        os.environ.update(environment)
        notebook = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
            for kind, text in CELLS])
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                           "language": "python"}
        NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
        (work / "lab").mkdir()
        nbformat.write(notebook, work / "lab" / "checked_exercise.ipynb")
        port, token = browser.free_port(), secrets.token_hex(16)
        lab = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "jupyter-lab"), "--no-browser", f"--port={port}", "--ip=127.0.0.1",
             f"--ServerApp.token={token}", f"--ServerApp.root_dir={work / 'lab'}",
             "--ServerApp.port_retries=0",
             "--LabApp.news_url=None",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            env=environment, stdout=subprocess.DEVNULL, stderr=open(work / "lab.log", "w"),
            start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5)
                    break
                except OSError:
                    if time.monotonic() > deadline or lab.poll() is not None:
                        raise SystemExit("screenshot_check: JupyterLab did not start in 120 s: "
                                         + (work / "lab.log").read_text()[-2000:]) from None
                    time.sleep(0.5)
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            browser.screenshot(f"http://127.0.0.1:{port}/lab/tree/checked_exercise.ipynb?token={token}", out,
                               budget_ms=20_000)
        finally:
            lab.terminate()
            lab.wait(timeout=30)
    print(f"screenshot: {out} {browser.png_size(out)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
