"""One small registry type for everything other packages may add to prb: reward models, persona
sources, checks, probes, rejected strategies and model backends.

Each registry has its built-in entries and reads the entry points of the group `prb.<kind>`
(`[project.entry-points."prb.reward_models"]` in another package's pyproject.toml): installing
that package is all it takes, no prb file changes. Entries are objects, or "module:attr" strings
imported on first use, so a heavy entry (torch) costs nothing until it is named.
A leaf: imports nothing of prb.
"""

from __future__ import annotations

import functools
import pkgutil
from collections.abc import Iterable, Iterator
from importlib import import_module
from importlib.metadata import entry_points


class Registry:
    def __init__(self, kind: str, builtin: dict[str, object]):
        self.kind = kind
        self.group = f"prb.{kind}"
        self._builtin = dict(builtin)
        self._loaded: dict[str, object] = {}  # plugins, once imported

    @functools.cached_property
    def _plugins(self) -> dict[str, object]:
        return {ep.name: ep for ep in entry_points(group=self.group)
                if ep.name not in self._builtin}  # fmt: skip

    def names(self) -> list[str]:
        return [*self._builtin, *sorted(self._plugins)]

    def __contains__(self, name: str) -> bool:
        return name in self._builtin or name in self._plugins

    def get(self, name: str):
        """The entry called `name` (KeyError if none), imported if it was a reference."""
        if name in self._builtin:
            entry = self._builtin[name]
            if isinstance(entry, str) and ":" in entry:
                module, _, attr = entry.partition(":")
                entry = self._builtin[name] = getattr(import_module(module), attr)
            return entry
        if name not in self._loaded:
            self._loaded[name] = self._plugins[name].load()  # an EntryPoint
        return self._loaded[name]

    def __iter__(self) -> Iterator[object]:
        return (self.get(n) for n in self.names())


def declared(package: str, path: Iterable[str], attr: str, kind: str) -> list:
    """What every module of `package` (but `base`) declares as `attr`, then what other
    packages declare in the entry points of `prb.<kind>`: a new one is one file, or a plugin."""
    found = [
        getattr(import_module(f"{package}.{m.name}"), attr)
        for m in pkgutil.iter_modules(path)
        if m.name != "base"
    ]
    plugins = Registry(kind, {})
    return found + [plugins.get(n) for n in plugins.names()]
