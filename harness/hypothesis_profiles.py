"""The harness's hypothesis profiles: ``ci`` (the default) and ``nightly``.

:func:`register` runs when the plugin is imported (hypothesis' own plugin loads
``--hypothesis-profile`` in its ``pytest_configure``, so the names must exist by then);
:func:`load_default` picks one from :data:`ENV` when ``--hypothesis-profile`` is not
given. Errors are :class:`ProfileError` naming the bad name and the registered ones.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

PROFILES = {
    # ci: fast and derandomised, so CI is reproducible; nightly: many more examples.
    "ci": {"max_examples": 40, "derandomize": True, "deadline": None, "print_blob": True},
    "nightly": {"max_examples": 1000, "deadline": None, "print_blob": True},
}
ENV = "HARNESS_HYPOTHESIS_PROFILE"


class ProfileError(ValueError):
    """An unknown profile name (the plugin reports it as a usage error)."""


def register() -> None:
    from hypothesis import settings

    for name, values in PROFILES.items():
        settings.register_profile(name, **values)


def check_registered(name: str) -> None:
    """Refuse a ``--hypothesis-profile`` nobody registered (before hypothesis crashes on it)."""
    from hypothesis import settings

    try:
        settings.get_profile(name)
    except Exception:  # noqa: BLE001 - hypothesis raises InvalidArgument for an unknown name
        raise ProfileError(f"--hypothesis-profile {name!r} is not a registered profile; this "
                           f"harness registers {sorted(PROFILES)} (or register your own in a "
                           "conftest.py)") from None


def load_default(requested: Optional[str], environ: Optional[Mapping[str, str]] = None) -> None:
    """Load :data:`ENV`'s profile (``ci`` when unset) unless ``--hypothesis-profile`` was
    given (``requested``): hypothesis' own option wins."""
    if requested is not None:
        return
    from hypothesis import settings

    name = (os.environ if environ is None else environ).get(ENV, "ci")
    if name not in PROFILES:
        raise ProfileError(f"{ENV}={name!r} (from the environment) is not a profile; choose "
                           f"from {sorted(PROFILES)}")
    settings.load_profile(name)
