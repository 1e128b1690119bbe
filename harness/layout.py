"""Where the conformance suites are, and ``python -m harness run``: the suites from any folder.

Note [Installed suites]
~~~~~~~~~~~~~~~~~~~~~~~
The checks live in ``suites/`` beside the ``harness`` package in a checkout. The wheel
ships the same files inside the package, as ``harness/suites/`` (``setup.py`` maps the
package ``harness.suites`` to the folder ``suites``), with ``harness/suites.ini``: the
pytest configuration of an installed run (the checkout's is ``pyproject.toml``'s
``[tool.pytest.ini_options]``; ``tests/test_packaging.py`` keeps the two in step).

A run of the installed suites uses the package folder as pytest's rootdir, so node ids
read ``suites/<area>/<file>.py::<test>`` exactly as in a checkout: the same record ids,
the same per-test seeds (crc32 of the node id), the same known-failure globs, and
baselines recorded from a checkout compare with runs of the wheel. What a run writes
never goes into the package: with the package as rootdir, ``baselines/`` and
``results/`` default to the folder the run was started from
(:func:`outputs_home`), and pytest's cache to ``.pytest_cache`` there.

``python -m harness run [pytest arguments]`` is that run (:func:`main`): pytest with
``-c`` the configuration and ``--rootdir`` the folder holding ``suites/`` (the installed
package, or the checkout), the plugin loaded before pytest reads the command line (so
``--baseline-dir /tmp/B`` is an option and its value, never a test path: Note [Path
options without '='] in harness/plugin.py), ``suites/`` selected when no test path is
given, and a test path that starts with ``suites/`` and does not exist where the run
was started naming the suites' own file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

PACKAGE = Path(__file__).resolve().parent
"""The ``harness`` package folder (in a checkout: ``<checkout>/harness``)."""

SUITES = "suites"
INSTALLED_INI = PACKAGE / "suites.ini"
REWRITE_WARNING = ("ignore:Module already imported so cannot be rewritten"
                   ":pytest.PytestAssertRewriteWarning")


def installed_suites() -> Optional[Path]:
    """The suites shipped inside the package (``harness/suites``), or None in a checkout."""
    path = PACKAGE / SUITES
    return path if path.is_dir() else None


def suites_root() -> tuple[Path, Path]:
    """The folder holding ``suites/`` and the pytest configuration to run it with:
    (the package, ``harness/suites.ini``) when installed, else (the checkout,
    ``pyproject.toml``).

    Raises:
        FileNotFoundError: neither layout is there (a broken install), saying how to fix it.
    """
    if installed_suites() is not None and INSTALLED_INI.is_file():
        return PACKAGE, INSTALLED_INI
    checkout = PACKAGE.parent
    if (checkout / SUITES).is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout, checkout / "pyproject.toml"
    raise FileNotFoundError(
        f"no conformance suites: neither {PACKAGE / SUITES} (an installed wheel) nor "
        f"{checkout / SUITES} (a checkout) exists; reinstall the package (pip install "
        "npu-conformance, or pip install -e . in a checkout)")


def is_installed_root(rootpath: Path) -> bool:
    """Whether pytest's rootdir is the installed package (a run of the installed suites)."""
    return installed_suites() is not None and Path(rootpath).resolve() == PACKAGE


def outputs_home(rootpath: Path, invocation_dir: Path) -> Path:
    """Where ``baselines/`` and ``results/`` default to: the rootdir, except for a run of
    the installed suites (never inside the package): the folder the run started in."""
    return Path(invocation_dir) if is_installed_root(rootpath) else Path(rootpath)


def pytest_arguments(args: Sequence[str], here: Path) -> list[str]:
    """The pytest command line of ``python -m harness run ARGS`` started in ``here``."""
    root, ini = suites_root()
    # this process imported harness (and through it hypothesis) before pytest could mark
    # them for assertion rewriting, which pytest would warn about; they hold no tests
    fixed = ["-c", str(ini), "--rootdir", str(root), "-W", REWRITE_WARNING,
             # conftests from suites/ down only: the plugin is loaded already, and the
             # checkout's conftest.py (which loads it too) would be met after pytest's start
             "--confcutdir", str(root / SUITES)]
    if root == PACKAGE:  # the installed suites: pytest's cache beside the outputs
        fixed += ["-o", f"cache_dir={Path(here).resolve() / '.pytest_cache'}"]
    return [*fixed, *args]


class RunPlugin:
    """``python -m harness run``'s selection: ``suites/`` when no test path is given; a
    test path under ``suites/`` that does not exist here names the suites' own file."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def pytest_configure(self, config) -> None:
        import pytest

        if config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args[:] = [str(self.root / SUITES)]
            return
        here = config.invocation_params.dir
        config.args[:] = [self._resolved(arg, here) for arg in config.args]

    def _resolved(self, arg: str, here: Path) -> str:
        path, sep, rest = arg.partition("::")
        parts = Path(path).parts
        if (parts and parts[0] == SUITES and not (here / path).exists()
                and (self.root / path).exists()):
            return str(self.root / path) + sep + rest
        return arg


def main(argv: Sequence[str]) -> int:
    """``python -m harness run [pytest arguments]``: pytest's exit status."""
    import pytest

    try:
        root, _ = suites_root()
    except FileNotFoundError as exc:
        print(f"error: {exc}")
        return int(pytest.ExitCode.USAGE_ERROR)
    here = Path.cwd()
    return int(pytest.main(pytest_arguments(argv, here),
                           plugins=["harness.plugin", RunPlugin(root)]))
