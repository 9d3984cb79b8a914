"""What each lesson needs and how long it runs: the one table the README, the course site and the doctor read.

``python -m kerasdist.course.lesson_needs README.md`` rewrites the README's table from it; the site puts
each lesson's rows at the top of its page; ``kerasdist doctor`` checks this machine for them.
"""

import dataclasses
import re
import sys

# The doctor's checks (kerasdist/doctor/checks.py keys) behind each kind of need.
PYTHON_CHECKS = ("python", "tensorflow", "keras", "numpy")
R_BRIDGE_CHECKS = ("r", "reticulate", "rpy2", "numpy_reticulate")
R_TWIN_CHECKS = R_BRIDGE_CHECKS + ("keras3", "tfdatasets", "tensorflow_r")
MNIST = "MNIST (offline sample or full)"
FASHION = "Fashion-MNIST (Debian package)"
KERAS3_TWIN = "keras3, tfdatasets, tensorflow"
KERNEL = "the kernel"
# What the short words of the table mean: all under the README's table, those a lesson uses on its page.
NOTES = {
    "replicas": "A replica is a GPU, a slice of one GPU, or a simulated CPU device on a laptop "
                "(`kerasdist.configure_replicas` picks).",
    MNIST: "MNIST is the offline sample of 5,000 real digits, or full MNIST when Keras has it cached.",
    FASHION: "Fashion-MNIST comes from Debian's `dataset-fashion-mnist` package.",
    KERAS3_TWIN: f"The R twins (01-09) need R's reticulate (1.42 or newer) and the CRAN packages "
                 f"{KERAS3_TWIN}.",
    "kerasdist": "Lesson 00 needs R with reticulate and the kerasdist R package (set-up installs it).",
}
README_START, README_END = "<!-- lesson-needs -->", "<!-- /lesson-needs -->"


def replicas(count):
    """The devices of a lesson that trains on ``count`` MirroredStrategy replicas.

    Example:
        >>> replicas(2)
        '2 replicas'
    """
    return f"{count} replicas"


@dataclasses.dataclass(frozen=True)
class Lesson:
    """One lesson: its notebooks, measured run times and what a machine needs to run it.

    ``python_s`` and ``r_s`` are the run times measured on a 2-core CPU (seconds; None where the
    lesson has no notebook in that language); ``r_packages`` are those its R notebook loads.
    """

    number: str
    stem: str
    title: str
    python_s: int | None
    r_s: int
    devices: str
    processes: str
    backend: str
    data: str
    r_packages: str = KERAS3_TWIN

    @property
    def notebooks(self):
        """The notebook names (no ``.ipynb``), Python first.

        Example:
            >>> LESSONS[1].notebooks
            ('01_quickstart', '01_quickstart_R')
        """
        if self.python_s is None:
            return (self.stem,)
        return (self.stem, self.stem + "_R")

    def rows(self):
        """(label, value) rows of the lesson's needs, as its page shows them."""
        return [
            ("Runs in", self.run_times()),
            ("Devices", self.devices),
            ("Processes", self.processes),
            ("Backend", self.backend),
            ("Data", self.data),
            ("R packages", self.r_packages),
        ]

    def run_times(self):
        """The run times as one phrase, e.g. ``34 s (Python), 44 s (R) on a 2-core CPU``."""
        measured = ((self.python_s, "Python"), (self.r_s, "R"))
        times = [f"{seconds} s ({language})" for seconds, language in measured if seconds is not None]
        return ", ".join(times) + " on a 2-core CPU"

    def notes(self, notebook=None):
        """What the short words of this lesson's rows mean, for ``notebook`` (or for both notebooks)."""
        used = (["replicas"] if "replicas" in self.devices else []) + [self.data]
        if notebook is None or notebook.endswith("_R"):
            used.append(self.r_packages if self.r_packages == KERAS3_TWIN else "kerasdist")
        return " ".join(NOTES[key] for key in used)

    def checks(self, notebook):
        """The doctor's check keys that ``notebook`` (one of :attr:`notebooks`) needs."""
        needed = PYTHON_CHECKS
        if "JAX" in self.backend:
            needed += ("jax",)
        if self.data == FASHION:
            needed += ("fashion_mnist",)
        if notebook.endswith("_R"):
            needed += R_TWIN_CHECKS if self.r_packages == KERAS3_TWIN else R_BRIDGE_CHECKS + ("kerasdist_r",)
        return needed


LESSONS = (
    Lesson("00", "00_R_with_reticulate_R", "R with reticulate", None, 52, replicas(2), KERNEL,
           "TensorFlow", MNIST, "reticulate, kerasdist (R; make setup installs both)"),
    Lesson("01", "01_quickstart", "Quickstart", 24, 28, replicas(2), KERNEL, "TensorFlow", MNIST),
    Lesson("02", "02_checkpoints_resume", "Checkpoints and resume", 72, 55, replicas(2),
           "kernel + a training process it kills", "TensorFlow", MNIST),
    Lesson("03", "03_convergence", "Convergence", 73, 106, "1 device, " + replicas(2),
           KERNEL, "TensorFlow", MNIST),
    Lesson("04", "04_input_pipelines", "Input pipelines", 69, 129, replicas(2) + ", 2 workers simulated",
           KERNEL, "TensorFlow", MNIST),
    Lesson("05", "05_multi_worker", "Multi-worker", 75, 57, "2 workers, 1 device each",
           "kernel + 2 worker processes on 127.0.0.1", "TensorFlow", MNIST),
    Lesson("06", "06_strategy_map", "Strategy map", 43, 45, replicas(2),
           "kernel + a parameter-server cluster process", "TensorFlow", MNIST),
    Lesson("07", "07_keras_distribution_jax", "keras.distribution on JAX", 77, 54,
           "2 JAX devices, " + replicas(2),
           "kernel + 2 JAX processes on 127.0.0.1", "JAX and TensorFlow",
           MNIST),
    Lesson("08", "08_speed", "Speed", 115, 118, "1 device (a GPU or the CPU)",
           "kernel + a process per JAX rung", "TensorFlow and JAX", FASHION),
    Lesson("09", "09_sync_cost", "What synchronization costs", 67, 69, replicas(4) + ", 2-4 JAX devices",
           "kernel + worker processes on 127.0.0.1", "TensorFlow and JAX", MNIST),
)


def lesson_of(notebook):
    """The :class:`Lesson` a notebook name (``03_convergence_R``, with or without a folder) belongs to.

    Raises:
        KeyError: no lesson has that notebook.

    Example:
        >>> lesson_of("notebooks/03_convergence_R").title
        'Convergence'
    """
    name = notebook.rsplit("/", 1)[-1].removesuffix(".ipynb")
    for lesson in LESSONS:
        if name in lesson.notebooks:
            return lesson
    raise KeyError(f"no lesson has the notebook {name!r}; lessons: {[lesson.stem for lesson in LESSONS]}")


def lessons_needing(check):
    """The lessons one of whose notebooks needs the doctor's ``check``, runs of numbers joined: ``07-09``.

    Example:
        >>> lessons_needing("fashion_mnist"), lessons_needing("keras3")
        ('08', '01-09')
    """
    numbers = [int(lesson.number) for lesson in LESSONS
               if any(check in lesson.checks(notebook) for notebook in lesson.notebooks)]
    runs = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(f"{first:02d}" if first == last else f"{first:02d}-{last:02d}" for first, last in runs)


def readme_table():
    """The README's table of what each lesson needs, in Markdown, linking to the notebooks."""
    lines = ["| lesson | runs in (Python / R) | devices | processes | backend | data |",
             "|---|---|---|---|---|---|"]
    for lesson in LESSONS:
        links = " · ".join(f"[{'R' if name.endswith('_R') else 'Python'}](notebooks/{name}.ipynb)"
                           for name in lesson.notebooks)
        python = "—" if lesson.python_s is None else f"{lesson.python_s} s"
        lines.append(f"| {lesson.number} {lesson.title} ({links}) | {python} / {lesson.r_s} s "
                     f"| {lesson.devices} | {lesson.processes} | {lesson.backend} | {lesson.data} |")
    return "\n".join(lines + ["", " ".join(NOTES.values())])


def with_readme_table(text):
    """``text`` (a README) with the part between its lesson-needs markers replaced by :func:`readme_table`.

    Raises:
        ValueError: the markers are missing.
    """
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"the README has no {README_START} ... {README_END} markers")
    return pattern.sub(lambda _: f"{README_START}\n{readme_table()}\n{README_END}", text)


def main(argv):
    """Rewrite the README named in ``argv`` (``python -m kerasdist.course.lesson_needs README.md``)."""
    if len(argv) != 1:
        print("usage: python -m kerasdist.course.lesson_needs README.md", file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as handle:
            text = with_readme_table(handle.read())
    except (OSError, ValueError) as error:
        print(f"kerasdist.course.lesson_needs: error: {error}", file=sys.stderr)
        return 2
    with open(argv[0], "w", encoding="utf-8") as handle:
        handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
