"""The files of a comparison: comparison.json, comparison.csv (tidy rows) and convergence.png."""

import csv
import json
import os

from kerasdist import checks
from kerasdist.errors import KerasdistError

RESULTS_JSON = "comparison.json"
RESULTS_CSV = "comparison.csv"
FIGURE = "convergence.png"


def check_creatable_directory(directory):
    """Raise ``KerasdistError`` unless ``directory`` is (or can be made) a writable folder; create nothing.

    Example:
        >>> check_creatable_directory("results")  # doctest: +SKIP
    """
    existing = os.path.abspath(directory)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if os.path.exists(directory) and not os.path.isdir(directory):
        checks.fail("out_dir", "a folder, not a file", "out_dir", directory, "choose another --out")
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        checks.fail("out_dir", "a folder that can be written", "out_dir", directory,
                        f"{existing} is not writable; choose another --out")


def write_comparison(comparison, out_dir):
    """Write comparison.json, comparison.csv (tidy rows) and convergence.png; return their paths."""
    import matplotlib.pyplot as plt  # here: a comparison without files needs no matplotlib

    from kerasdist.experiments.plots import plot_convergence

    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as error:
        raise KerasdistError(f"cannot create output directory {out_dir} ({error.strerror})") from None
    files = {name: os.path.join(out_dir, file) for name, file in
             (("json", RESULTS_JSON), ("csv", RESULTS_CSV), ("figure", FIGURE))}
    rows = comparison.tidy()
    with open(files["csv"], "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figure = plot_convergence(comparison)
    figure.savefig(files["figure"], dpi=120, bbox_inches="tight")
    plt.close(figure)  # written to a file: do not also show it in a notebook
    comparison.files = files
    with open(files["json"], "w") as stream:
        json.dump(comparison.to_dict(), stream, indent=1)
    return files
