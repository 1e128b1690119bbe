"""What pyproject.toml cannot say statically: the packages, with the conformance suites.

``suites/`` ships inside the wheel as the package ``harness.suites`` (Note [Installed
suites] in harness/layout.py); its folders have no ``__init__.py`` (pytest imports the
checks by file), so they are listed here as namespace packages.
"""

from setuptools import find_namespace_packages, find_packages, setup

SUITES = ["harness.suites", *(f"harness.suites.{name}" for name in
                              find_namespace_packages("suites", exclude=["*__pycache__*"]))]

setup(packages=[*find_packages(include=["harness", "harness.*"]), *SUITES],
      package_dir={"harness.suites": "suites"})
