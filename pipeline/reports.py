"""Rendering reports (audit, compare, eval) that open foreign data safely.

Every value a template prints is escaped: HTML templates autoescape, and Markdown templates pass
every value through `md`, which leaves no tag, table separator or line break for a renderer to
act on. Audits are where people open other people's releases: a category or answer holding
`<script>` must arrive as text.
"""

from __future__ import annotations

import html
import re

import jinja2

from pipeline.paths import TEMPLATES
from pipeline.text import terminal

_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")


def md(value: object) -> str:
    """`value` as inert inline Markdown (one table cell or line): HTML escaped, `|`, backticks
    and link brackets escaped (`[x](javascript:…)` stays text), line breaks as spaces, control
    characters shown as escapes (ESC never reaches a terminal that `cat`s the file)."""
    text = html.escape(_BREAKS.sub(" ", str(value)), quote=False)
    text = terminal(text).replace("|", "\\|").replace("`", "&#96;")
    return text.replace("[", "\\[").replace("]", "\\]")


def _finalize(value: object) -> object:
    return md(value) if isinstance(value, str) else value


def environment(markdown: bool, **filters) -> jinja2.Environment:
    """The Jinja environment of prb's report templates: HTML autoescaped, or Markdown with
    every printed value passed through `md`."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=not markdown,
        finalize=_finalize if markdown else None,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(filters)
    return env


def render(name: str, **variables) -> str:
    """Template `name` (`*.html.j2` or `*.md.j2`) rendered with its escaping."""
    markdown = name.endswith(".md.j2")
    return environment(markdown, **_FILTERS).get_template(name).render(**variables)


_FILTERS = {"pct": lambda x: "n/a" if x is None else f"{x:.1%}"}


def pyplot():
    """matplotlib's pyplot for files only (no display), with labels drawn as plain text: a
    model name or category holding `$...$` is not parsed as math (which can fail to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt
