"""environment.yml (the GPU workstation's conda environment) and the package metadata: conda cannot run here, so
check what the files can show: environment.yml parses as a conda environment and holds what the package and the
R package declare; the license is in the form setuptools asks for."""

import re
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
# What the workstation installs from pip with the package: TensorFlow's GPU build, the lessons, the tests and
# lesson 07's JAX (the `r` extra's rpy2 comes from conda, built for conda's R).
WORKSTATION_EXTRAS = {"gpu", "notebooks", "test", "jax"}
# R packages that come with R itself (r-base), never from a conda package of their own.
R_BASE_PACKAGES = {"base", "compiler", "datasets", "graphics", "grDevices", "grid", "methods", "parallel",
                   "splines", "stats", "stats4", "tcltk", "tools", "utils"}
CONDA_SPEC = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(.*)$")


@pytest.fixture(scope="module")
def environment():
    with open(REPO / "environment.yml") as stream:
        return yaml.safe_load(stream)


def conda_packages(environment):
    """conda package name -> its version constraint ("" when none), the pip section left out."""
    found = {}
    for entry in environment["dependencies"]:
        if isinstance(entry, str):
            name, constraint = CONDA_SPEC.match(entry).groups()
            found[name.lower()] = constraint.replace(" ", "")
    return found


def specifier(constraint):
    """A conda version constraint as a PEP 440 specifier set: conda's "=1.26" is "==1.26.*"."""
    return SpecifierSet(re.sub(r"^=([\d.]+)$", r"==\1.*", constraint))


def description_field(field):
    """The package names of a field of r/DESCRIPTION (Imports, Suggests), versions dropped."""
    text = (REPO / "r" / "DESCRIPTION").read_text()
    match = re.search(rf"^{field}:(.*?)(?=^\S|\Z)", text, re.M | re.S)
    return {re.sub(r"\(.*\)", "", name).strip() for name in match.group(1).split(",") if name.strip()}


def test_it_is_a_conda_environment(environment):
    assert isinstance(environment, dict)
    assert isinstance(environment.get("name"), str) and environment["name"]
    assert isinstance(environment.get("channels"), list) and environment["channels"]
    assert isinstance(environment.get("dependencies"), list) and environment["dependencies"]
    assert all(isinstance(entry, str) or (isinstance(entry, dict) and set(entry) == {"pip"})
               for entry in environment["dependencies"])


@pytest.mark.parametrize("field", ["Imports", "Suggests"])
def test_every_r_package_the_r_package_uses_is_in_it(environment, field):
    wanted = {f"r-{name.lower()}" for name in description_field(field) - R_BASE_PACKAGES}
    missing = wanted - conda_packages(environment).keys()
    assert not missing, f"environment.yml lacks the R packages of r/DESCRIPTION's {field}: {sorted(missing)}"


def test_pip_installs_the_package_with_the_workstations_extras(environment):
    pip = next(entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict))
    editable = next(line for line in pip if line.startswith("-e"))
    extras = set(re.search(r"\[(.*)\]", editable).group(1).split(","))
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras <= declared.keys(), f"extras that pyproject.toml does not declare: {extras - declared.keys()}"
    assert WORKSTATION_EXTRAS <= extras, f"the workstation also needs the extras {WORKSTATION_EXTRAS - extras}"
    assert "rpy2" in conda_packages(environment)  # the r extra is left out: rpy2 comes from conda


def test_its_versions_agree_with_the_package(environment):
    packages = conda_packages(environment)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    python = Version(packages["python"].lstrip("="))
    assert python in SpecifierSet(project["requires-python"])
    # reticulate >= 1.38 takes NumPy 2, as TensorFlow 2.21 and JAX 0.6 do: an environment whose R has it
    # must not hold NumPy back at 1.x.
    assert Version("1.37") not in specifier(packages["r-reticulate"])
    assert Version("2.1.0") in specifier(packages.get("numpy", "")), "environment.yml pins NumPy 1"


def test_the_license_is_an_spdx_expression_as_setuptools_asks():
    # A TOML table (license = { text = ... }) makes every install print setuptools' deprecation warning.
    from packaging.licenses import canonicalize_license_expression

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    license_expression = pyproject["project"]["license"]
    assert isinstance(license_expression, str)
    assert canonicalize_license_expression(license_expression) == license_expression
    setuptools = next(r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools"))
    assert Version("76") not in SpecifierSet(setuptools.removeprefix("setuptools"))  # the string form: 77+
