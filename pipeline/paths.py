"""Where prb's bundled data lives, and where a relative path from a config or option points.

In a checkout, the top-level `prompts/`, `configs/`, `personas/` and `annotation/` folders are
the data (the files users edit), and relative paths resolve against the checkout, as always.
An installed wheel ships the same folders inside the package (`pipeline/_data/`, copied there
by `setup.py` at build time) and finds them through `importlib.resources`; there a relative path
resolves against the working directory, except one into those folders that exists only in the
bundle (`personas/library`, `configs/demo.yaml`), which is read from the bundle.

A leaf: imports nothing of prb.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED = ("prompts", "configs", "personas", "annotation")
CHECKOUT = Path(__file__).resolve().parent.parent


def _is_checkout(root: Path) -> bool:
    """A source tree (the package beside prompts/, configs/ and personas/), not site-packages."""
    return all((root / d).is_dir() for d in ("prompts", "configs", "personas"))


IN_CHECKOUT = _is_checkout(CHECKOUT)
# the folder holding prompts/, configs/, personas/, annotation/
DATA = CHECKOUT if IN_CHECKOUT else Path(str(resources.files("pipeline").joinpath("_data")))
TEMPLATES = Path(__file__).resolve().parent / "templates"


def data(*parts: str) -> Path:
    """A bundled file or folder, e.g. data("configs", "demo.yaml")."""
    return DATA.joinpath(*parts)


def resolve_path(path: str | Path) -> Path:
    """A path from a config or an option: absolute as given; relative to the checkout in a
    checkout; else relative to the working directory, or the bundle for bundled data that the
    working directory does not have."""
    p = Path(path)
    if p.is_absolute():
        return p
    if IN_CHECKOUT:
        return CHECKOUT / p
    here = Path.cwd() / p
    if not here.exists() and p.parts and p.parts[0] in BUNDLED and (DATA / p).exists():
        return DATA / p
    return here
