"""The committed diagrams in notebooks/figures are exactly what scripts/draw_diagrams.py draws."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "draw_diagrams.py"
FIGURES = REPO / "notebooks" / "figures"
DIAGRAMS = ["sync_step_all_reduce.svg", "data_vs_model_parallelism.svg", "cluster_tf_config.svg",
            "keras_distribution_mesh.svg"]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The diagrams, drawn afresh by the script into a temporary folder."""
    output_dir = tmp_path_factory.mktemp("figures")
    subprocess.run([sys.executable, str(SCRIPT), "--output-dir", str(output_dir)],
                   check=True, capture_output=True, timeout=300)
    return output_dir


def drawn_by(svg):
    """The Matplotlib version named in an SVG's metadata."""
    return re.search(r"Matplotlib v([\w.]+)", svg).group(1)


def texts(svg):
    """The diagram's words, in drawing order (labels stay text: svg.fonttype none)."""
    return re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)


@pytest.mark.parametrize("name", DIAGRAMS)
def test_committed_diagram_equals_a_fresh_drawing(drawn, name):
    fresh, committed = (drawn / name).read_text(), (FIGURES / name).read_text()
    assert fresh.startswith("<?xml") and "<svg" in fresh
    redraw = "run: python scripts/draw_diagrams.py"
    assert texts(committed) == texts(fresh), f"notebooks/figures/{name} says other words than the script; {redraw}"
    if drawn_by(committed) == drawn_by(fresh):  # another Matplotlib may place the same shapes differently
        assert committed == fresh, f"notebooks/figures/{name} is not what the script draws; {redraw}"


def test_the_script_draws_the_same_bytes_twice(drawn, tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--output-dir", str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(DIAGRAMS)
    for name in DIAGRAMS:
        assert (tmp_path / name).read_bytes() == (drawn / name).read_bytes(), name
