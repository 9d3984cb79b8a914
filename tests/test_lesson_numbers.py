"""Every figure a lesson states comes from its own run, so the text holds on any data.

The committed outputs of each lesson that runs here (the Python lessons and the reticulate-only R
notebook) are its run on the offline sample: nbval executes them again in the same test run and
fails on any error. Each lesson was also run on a stand-in MNIST of another size (tests/standin.py:
real digits, 2,250 train instead of the sample's 3,333) when it was executed for its committed
outputs: ``scripts/run_notebooks.sh`` records the numbers that run printed in
``tests/data/standin_numbers.json``, with a digest of the lesson's code cells; a lesson whose code
changed since fails here until it is run again. A number that a code cell printed on the sample but
that no cell printed on the stand-in is a figure of the data: sample counts, steps, checkpoint names,
losses, accuracies. Such a number must not be typed anywhere in the lesson's markdown or code, nor
in its R twin's: the lesson has to print it from a variable. Lesson 01 runs on the stand-in here
too (the slow tier), the end-to-end proof that a lesson runs there and that the check finds its figures.
Timings differ between any two runs, so no text can hold them either; they are told by what they
are (a number with a unit of time or throughput: "1.14 s/epoch", "818 samples/s", "6.5 s") and
left out, which also keeps a chance match with a typed number from failing.

Single-digit integers are not checked (they name epochs, replicas and workers in prose), nor, in
code, decimals of one digit (styling: alpha=0.3) and powers of ten (unit conversions), nor the
sample's own description ("5,000-digit").

Record the stand-in run of lessons by hand (scripts/run_notebooks.sh does it for each lesson it runs):

    .venv/bin/python tests/test_lesson_numbers.py notebooks/03_convergence.ipynb
"""

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from kerasdist.data import SAMPLE_DESCRIPTION
from standin import write_standin
from test_notebooks import NOTEBOOKS, all_notebooks, ids, is_keras3_twin, load, source, twin_of

# A number as a lesson prints it: 3333, 3,333, 0.908, 18 (of 18%), 2.4 (the mantissa of 2.4e-07). Versions
# such as 2.21.0 are one token and skipped; the lookbehind keeps "ckpt-52" -> 52, "v3.1" out.
# A number glued to a unit ("32ms/step", "2s") is a timing of Keras' progress bar, not a figure.
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)((?:\.\d+)*)(?:[eE][-+]?\d+)?(?!\w)")
# A timing as lessons print it: a number with a unit of time or throughput ("1.14 s/epoch", "47 ms per
# training step", "818 samples/s", "in 6.5 s"; rates measured on the machine, "16.0 GFLOP/s"), a list of them ("default 9309, mirrored 3816 samples/s")
# or a speed-up ("x1.4 faster", "30% less time"); and what lesson 8 derives from measured rates: a share of
# the peak ("MFU 19.7%", "( 67% of peak)", "45% of the roof", "share of the measured peak 21.3%"), a time per
# step ("-84 µs"), the ridge point ("16.1 FLOP/byte"), a
# spread ("spread 12.0 to 13.2"), a step's shares ("shares of one step ...: forward 15%, optimizer update 24%")
# and a ratio of speeds ("2.2x the time", "5.3x the guide's"); lesson 9's fits of measured all-reduces
# ("fit error 14%") and what they give ("break-even local batch 155").
TIME_UNIT = r"(?:s/epoch|samples/s|ms/step|ms|s|seconds?|GFLOP/s|GB/s)(?![\w/])"
NAMED = r"[A-Za-z_]\w* [\d.,]+"
TIMING = re.compile(rf"(?:{NAMED}, )+{NAMED} ?{TIME_UNIT}|[\d.,]+ ?{TIME_UNIT}|\bx[\d.]+ faster|\d+% less time"
                    r"|MFU +[\d.]+%|\d+% of (?:peak|the attainable|the roof|the nominal peak|the bound|the isolated)"
                    r"|share of the measured peak +[\d.]+%|-?[\d,]+ µs|[\d.]+ FLOP/byte|spread +[\d.,]+ to +[\d.,]+"
                    r"|shares of one step[^\n]*|\b\d+(?:\.\d+)?x(?!\w)"
                    r"|fit error \d+%|break-even local batch [\d,]+")
RUN_TIMEOUT_S = 600

LESSONS_RUN_HERE = [p for p in all_notebooks() if not is_keras3_twin(p)]


def numbers(text):
    """The checked numbers in a text: integers of 2+ digits and decimals, commas and trailing zeros dropped."""
    found = set()
    for whole, decimals in NUMBER.findall(text):
        if decimals.count(".") > 1:
            continue  # a version number
        value = whole.replace(",", "") + decimals
        if "." in value:
            value = value.rstrip("0").rstrip(".")
        if "." in value or len(value.lstrip("0")) >= 2:
            found.add(value)
    return found


def printed_text(cell):
    """What a code cell showed a reader, timings left out: stdout and rich text outputs (stderr holds
    TensorFlow's logs)."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream" and output.get("name") == "stdout":
            parts.append("".join(output["text"]))
        for kind in ("text/plain", "text/markdown", "text/html"):
            value = output.get("data", {}).get(kind)
            if value:
                parts.append("".join(value) if isinstance(value, list) else value)
    return TIMING.sub(" ", "\n".join(parts))


def typed_numbers(cell):
    """The checked numbers typed into a cell; in code, one-digit decimals are styling (alpha=0.3)
    and powers of ten convert units (seconds * 1000)."""
    found = numbers(source(cell))
    if cell["cell_type"] == "code":
        found = {value for value in found
                 if len(value.partition(".")[2]) != 1 and not re.fullmatch(r"10+", value)}
    return found


def run_with_data(lesson, data):
    """Execute a copy of ``lesson`` with KERASDIST_DATA (and lesson 8's KERASDIST_SPEED_DATA) set to ``data``;
    return it as a dict."""
    notebook = nbformat.read(lesson, as_version=4)
    NotebookClient(notebook, timeout=RUN_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute(
        env=dict(os.environ, KERASDIST_DATA=str(data), KERASDIST_SPEED_DATA=str(data)))
    return json.loads(nbformat.writes(notebook))


def data_dependent_numbers(on_sample, printed_on_standin):
    """{number: first code cell index} printed by a cell on the sample but by no cell on the stand-in.

    A number the stand-in run prints too, in any cell, is a setting of the lesson (a constant that a
    run may print from another cell, e.g. in the name of the setting that came out fastest)."""
    found = {}
    for index, cell in enumerate(on_sample["cells"]):
        if cell["cell_type"] != "code":
            continue
        for value in numbers(printed_text(cell)) - printed_on_standin:
            found.setdefault(value, index)
    for value in numbers(SAMPLE_DESCRIPTION):  # facts of the offline source, not of a run
        found.pop(value, None)
    return found


def literal_uses(notebook, dependent):
    """Lines 'cell N (kind): number (printed by cell M)' for dependent numbers typed into ``notebook``."""
    uses = []
    for index, cell in enumerate(notebook["cells"]):
        for value in sorted(typed_numbers(cell) & dependent.keys()):
            uses.append(f"cell {index} ({cell['cell_type']}) types {value} (printed by cell {dependent[value]} on the sample)")
    return uses


RECORD = Path(__file__).resolve().parent / "data" / "standin_numbers.json"
# The lesson run on the stand-in in every full test run: the course's first, the cheapest that prints
# sample counts, steps and accuracies.
RUN_HERE_ON_THE_STANDIN = NOTEBOOKS / "01_quickstart.ipynb"


def code_digest(notebook):
    """sha256 of a notebook's code cells, in order: what its stand-in run depends on (not its outputs)."""
    digest = hashlib.sha256()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            digest.update(source(cell).encode() + b"\0")
    return digest.hexdigest()


def printed_numbers(notebook):
    """The checked numbers that any code cell of an executed notebook printed, timings left out."""
    return set().union(*(numbers(printed_text(cell)) for cell in notebook["cells"] if cell["cell_type"] == "code"))


def errors_of(notebook):
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in notebook["cells"] for o in c.get("outputs", [])
            if o["output_type"] == "error"]


def run_on_standin(lesson, standin_path):
    """Execute ``lesson`` on the stand-in; return the numbers it printed, or fail naming its errors."""
    on_standin = run_with_data(lesson, standin_path)
    errors = errors_of(on_standin)
    assert not errors, f"{lesson.name} fails on the stand-in: {errors}"
    return printed_numbers(on_standin)


def assert_types_no_figure_of_its_run(lesson, printed_on_standin):
    """Fail naming each number of the lesson's sample run (its committed outputs) typed into it or its twin."""
    dependent = data_dependent_numbers(load(lesson), printed_on_standin)
    assert dependent, f"{lesson.name} printed the same numbers on data of another size: is KERASDIST_DATA read?"
    uses = literal_uses(load(lesson), dependent)
    twin = twin_of(lesson)
    if not lesson.stem.endswith("_R") and twin.exists():
        uses += [f"{twin.name}: {use}" for use in literal_uses(load(twin), dependent)]
    assert not uses, (
        f"{lesson.name} states figures of one run as literals; print them from variables:\n  " + "\n  ".join(uses)
    )


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    return write_standin(tmp_path_factory.mktemp("standin") / "standin.npz")


# Reads the lesson's files only: not in its xdist group (its parameter is not named "lesson").
@pytest.mark.parametrize("notebook", LESSONS_RUN_HERE, ids=ids(LESSONS_RUN_HERE))
def test_lesson_types_no_figure_of_its_recorded_standin_run(notebook):
    recorded = json.loads(RECORD.read_text()).get(notebook.name)
    rerun = (f"bash scripts/run_notebooks.sh notebooks/{notebook.name}, or .venv/bin/python "
             f"tests/test_lesson_numbers.py notebooks/{notebook.name}")
    assert recorded, f"no stand-in run of {notebook.name} in {RECORD.name}: {rerun}"
    assert recorded["code_sha256"] == code_digest(load(notebook)), (
        f"{notebook.name}'s code changed since its stand-in run was recorded: run it again ({rerun})")
    assert_types_no_figure_of_its_run(notebook, set(recorded["printed_on_standin"]))


@pytest.mark.slow  # in its lesson's xdist group (conftest.py: a test parametrized by a lesson's path)
@pytest.mark.parametrize("lesson", [RUN_HERE_ON_THE_STANDIN], ids=ids([RUN_HERE_ON_THE_STANDIN]))
def test_lesson_runs_on_data_of_another_size_and_types_no_figure_of_its_run(lesson, standin):
    assert_types_no_figure_of_its_run(lesson, run_on_standin(lesson, standin))


def record(lessons):
    """Run each lesson on a new stand-in and write what it printed into ``RECORD`` (other lessons kept)."""
    recorded = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    with tempfile.TemporaryDirectory() as folder:
        standin_path = write_standin(Path(folder) / "standin.npz")
        for lesson in lessons:
            printed = run_on_standin(lesson, standin_path)
            recorded[lesson.name] = {"code_sha256": code_digest(load(lesson)), "printed_on_standin": sorted(printed)}
            RECORD.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
            print(f"{lesson.name}: stand-in run recorded ({len(printed)} numbers printed)", flush=True)


def test_numbers_are_read_as_a_reader_reads_them():
    assert numbers("3,333 train / 667 val, 5 left over, ckpt-52") == {"3333", "667", "52"}
    assert numbers("loss 0.2500, 18% slower, TF 2.21.0, 2.4e-07") == {"0.25", "18", "2.4"}
    assert numbers("replicas 1,2 and 1.0, 2s - 32ms/step") == set()
    timings = {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout", "text": (
        "test accuracy 0.908, 818 samples/s\nread  alone  0.54 s/epoch, 47 ms per step; in 6.5 s\n"
        "steady state: default 9309, mirrored 3,816 samples/s\n'+ cache', x1.4 faster; 30% less time, 52 steps\n"
        "ridge point: 16.1 FLOP/byte; ( 67% of peak), MFU 19.7%, (triad, spread 12.0 to 13.2); 89% accuracy\n"
        "reaches 99% of the attainable estimate; 2.2x the time, 12x the guide's; 0.75 x 64\n"
        "45% of the roof at its intensity; MFU  4.4%, share of the measured peak 21.3%; costs -84 µs more\n"
        "layer 3 forward  14.3 GFLOP/s (spread  11.3 to  15.1)\n"
        "shares of one step at 1 step per call: forward 15%, backward 18%, optimizer update 24%")}]}
    assert numbers(printed_text(timings)) == {"0.908", "52", "89", "0.75", "64"}
    assert typed_numbers({"cell_type": "code", "source": "plt.plot(x * 1000, alpha=0.3, lw=1.25) # 52"}) == {"1.25", "52"}
    assert typed_numbers({"cell_type": "markdown", "source": "loss 0.3"}) == {"0.3"}


if __name__ == "__main__":
    paths = [Path(arg).resolve() for arg in sys.argv[1:]]
    if not paths or any(path not in LESSONS_RUN_HERE for path in paths):
        sys.exit("usage: python tests/test_lesson_numbers.py NOTEBOOK...  (lessons that run here: "
                 + ", ".join(path.name for path in LESSONS_RUN_HERE) + ")")
    sys.path.insert(0, str(NOTEBOOKS.parent))
    from conftest import USER_SETTINGS, user_state_environment

    # The stand-in runs get a user state of their own, as a test run's lessons do.
    with tempfile.TemporaryDirectory(prefix="kerasdist-standin-user-state-") as user_state:
        os.environ.update(user_state_environment(user_state))
        for variable in USER_SETTINGS:
            os.environ.pop(variable, None)
        record(paths)
