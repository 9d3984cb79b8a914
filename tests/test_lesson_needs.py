"""Tests for kerasdist.course.lesson_needs: the one table of what each lesson needs, and who reads it (README, doctor)."""

from pathlib import Path

import pytest

from kerasdist.course import lesson_needs
from kerasdist.doctor import checks, report

ROOT = Path(__file__).resolve().parent.parent


def test_every_lesson_notebook_has_exactly_one_row_and_every_row_a_notebook():
    on_disk = sorted(path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    listed = sorted(name for lesson in lesson_needs.LESSONS for name in lesson.notebooks)
    assert listed == on_disk
    assert [lesson.number for lesson in lesson_needs.LESSONS] == sorted({name[:2] for name in on_disk})


def test_the_readme_table_is_the_one_the_source_writes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert lesson_needs.readme_table() in readme
    assert lesson_needs.with_readme_table(readme) == readme, "run: python -m kerasdist.course.lesson_needs README.md"


def test_a_changed_source_changes_the_readme_table(monkeypatch):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = lesson_needs.LESSONS[1]
    monkeypatch.setattr(lesson_needs, "LESSONS", (first.__class__(**{**first.__dict__, "python_s": 999}),))
    rewritten = lesson_needs.with_readme_table(readme)
    assert "| 999 s / " in rewritten and rewritten != readme


def test_a_readme_without_the_markers_is_refused_in_one_line_and_left_as_it_was(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    assert lesson_needs.main([str(readme)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert readme.read_text() == "# no table here\n"
    with pytest.raises(ValueError, match="no <!-- lesson-needs -->"):
        lesson_needs.with_readme_table("# no table here\n")


def _all_checks(status):
    keys = {key for lesson in lesson_needs.LESSONS for name in lesson.notebooks for key in lesson.checks(name)}
    return {key: checks.Check(key, key.upper(), status, "", "") for key in keys}


def test_the_doctors_lesson_rows_are_the_sources_notebooks_and_needs():
    ready = report.lesson_rows(_all_checks(checks.OK))
    assert [row["lesson"] for row in ready] == [name for lesson in lesson_needs.LESSONS for name in lesson.notebooks]
    assert all(row["ready"] and not row["missing"] for row in ready)
    by_key = _all_checks(checks.OK)
    by_key["jax"] = checks.Check("jax", "JAX", checks.MISSING, "", "")
    by_key["keras3"] = checks.Check("keras3", "keras3 (R)", checks.MISSING, "", "")
    rows = {row["lesson"]: row["missing"] for row in report.lesson_rows(by_key)}
    for lesson in lesson_needs.LESSONS:
        for name in lesson.notebooks:
            expected = (["JAX"] if "JAX" in lesson.backend else []) + (
                ["keras3 (R)"] if name.endswith("_R") and lesson.r_packages == lesson_needs.KERAS3_TWIN else [])
            assert rows[name] == expected, name


def test_the_doctor_names_the_lessons_that_need_jax_and_fashion_mnist():
    assert lesson_needs.lessons_needing("jax") == "07-09"
    assert lesson_needs.lessons_needing("fashion_mnist") == "08"
    assert lesson_needs.lessons_needing("kerasdist_r") == "00"
