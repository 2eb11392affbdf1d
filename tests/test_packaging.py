"""pyproject.toml as pip and setuptools read it: no deprecated forms."""

from __future__ import annotations

import tomllib
import warnings

from packaging.requirements import Requirement

from tests.conftest import ROOT


def test_pyproject_has_no_deprecation_warnings() -> None:
    """`license = { text = ... }` made every pip install warn that the table is deprecated."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"


def test_the_build_requires_a_setuptools_that_reads_spdx_licenses() -> None:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (setuptools,) = [
        Requirement(r) for r in doc["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert "76.9" not in setuptools.specifier and "77.0" in setuptools.specifier


def test_the_consoles_pages_and_scripts_ship_in_the_package() -> None:
    """Templates and vendored scripts are data files: without a package-data glob a wheel
    would install a console that answers every page with an error."""
    import fnmatch

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = doc["tool"]["setuptools"]["package-data"]["weir"]
    console = ROOT / "src" / "weir" / "console"
    files = [
        str(p.relative_to(ROOT / "src" / "weir"))
        for sub in ("templates", "static")
        for p in (console / sub).iterdir()
    ]
    assert any(f.endswith("htmx.min.js") for f in files)
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert missing == []
