"""The one Jinja2 environment of the report pages (harness/report/templates).

Autoescaping is on for every ``.html.j2`` template: a record id, a message or a stack
field that holds ``<`` or ``&`` is text on the page, never markup. What is markup (our
own inline SVG plots and sparklines) is passed as :class:`markupsafe.Markup` explicitly
(the ``svg`` and ``sparkline`` filters), so the template says where raw markup goes.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def environment():
    from jinja2 import Environment, PackageLoader, select_autoescape
    from markupsafe import Markup

    from harness.report.matrix import sparkline

    env = Environment(loader=PackageLoader("harness.report", "templates"),
                      autoescape=select_autoescape(["html", "html.j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["sparkline"] = lambda nights: Markup(sparkline(nights))  # our own SVG
    env.filters["svg"] = Markup  # a plot this package drew (harness/report/plots.py)
    env.filters["uri"] = lambda path: Path(path).resolve().as_uri() if path else ""
    return env


def render(name: str, **context) -> str:
    """Template ``name`` of harness/report/templates with ``context``."""
    return environment().get_template(name).render(**context)
