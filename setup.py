"""Which packages a wheel holds: every package found under rulegen/, and the templates.

Discovery, not a list: a subpackage split out later is shipped without a
change here (a hand-kept list once missed rulegen.plan, and every
non-editable install crashed). The templates live beside the package, as the
design card lays the repository out; `[tool.setuptools.package-dir]` in
pyproject.toml maps them to rulegen.templates, which discovery cannot see.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["rulegen", "rulegen.*"]), "rulegen.templates"])
