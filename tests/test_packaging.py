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
