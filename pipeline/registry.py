"""One registry type for everything prb or another package may add: stages, checks, probes,
model backends, reward-model kinds, persona sources and rejected strategies.

A `Registry[T]` holds its built-in entries — objects, or "module:attr" strings imported on
first use, or the modules of a package each declaring one attribute (listed without importing
them) — and reads the entry points of the group `prb.<kind>`
(`[project.entry-points."prb.checks"]` in another package's pyproject.toml): installing that
package is all it takes, no prb file changes. Every entry is type-checked when it loads. A name
taken twice is refused: between built-ins with an error, a plugin's with one warning line (the
built-in stays). A plugin that fails to import, names a missing attribute or has the wrong type
costs one warning line naming its distribution and entry point, and prb keeps working;
naming it (`get`) is one clear error. Plugins load on first use, never at import.

A leaf: imports nothing of prb but its errors.
"""

from __future__ import annotations

import difflib
import logging
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from pipeline.errors import PrbError

T = TypeVar("T")
log = logging.getLogger("prb")


class RegistryError(PrbError):
    """A name taken twice, an entry of the wrong type, or a plugin that failed to load."""


class UnknownName(RegistryError, KeyError):
    """A name no entry has: says which names there are, and the closest (a KeyError too)."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return str(self.args[0])


def resolve(ref: str) -> Any:
    """The object a "module:attr" reference names (ImportError/AttributeError if none)."""
    module, _, attr = ref.partition(":")
    obj = import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _where(ep: EntryPoint) -> str:
    dist = ep.dist.name if ep.dist is not None else "an unknown distribution"
    return f"entry point {ep.name} = {ep.value} of {dist} (group {ep.group})"


def _members(protocol: type) -> list[str]:
    """What a class or object must have to be a `protocol`: its attributes and methods."""
    names: dict[str, None] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object, Generic) or klass.__name__ == "Protocol":
            continue
        names.update(dict.fromkeys(getattr(klass, "__annotations__", {})))
        names.update(dict.fromkeys(n for n, v in vars(klass).items() if callable(v)))
    return [n for n in names if not n.startswith("_")]


class Registry(Generic[T]):
    """Named entries of type `type_`, built-ins first then plugins, iterated in `order`."""

    def __init__(
        self,
        kind: str,
        type_: type | tuple[type, ...],
        builtin: Mapping[str, T | str] | None = None,
        *,
        package: str | None = None,
        attr: str | None = None,
        order: Callable[[T], Any] | None = None,
        classes: bool = False,
        named: bool = False,
        claims: Callable[[T], set[str]] | None = None,
        reserved: Mapping[str, str] | None = None,
    ):
        self.kind = kind
        self.group = f"prb.{kind}"
        self.type = type_
        self.order = order
        self.classes = classes  # entries are classes deriving from `type_`, not instances
        self.named = named  # an entry's own `.name` must be the name it is registered under
        # what an entry contributes beyond its name (a check's settings, release columns and
        # fields): a plugin may add, never take what prb's own entries or `reserved` (claim ->
        # its owner) hold, so no plugin can rewrite a bundled setting or released column
        self.claims = claims
        self.reserved = dict(reserved or {})
        self._taken: dict[str, str] | None = None  # claim -> who holds it
        self._refs: dict[str, T | str] = {}
        self._plugins: dict[str, EntryPoint] | None = None
        self._loaded: dict[str, T] = {}
        self._failed: set[str] = set()
        self._all: tuple[T, ...] | None = None  # every entry, loaded and ordered, once
        if package:  # every module but base and _private ones: "package.module:attr"
            mod = import_module(package)
            for m in pkgutil.iter_modules(mod.__path__):
                if m.name != "base" and not m.name.startswith("_"):
                    self.add(m.name, f"{package}.{m.name}:{attr}")
        for name, entry in (builtin or {}).items():
            self.add(name, entry)

    # --- registration ---------------------------------------------------------------------

    def add(self, name: str, entry: T | str) -> None:
        """A built-in entry; a name already taken is an error (a bug in prb, not input)."""
        if name in self._refs:
            raise RegistryError(f"{self.kind}: {name!r} is registered twice")
        self._refs[name] = entry
        self._all = None

    def register(self, name: str) -> Callable[[T], T]:
        """As a decorator: `@BACKENDS.register("mine")` over the entry."""

        def deco(entry: T) -> T:
            self.add(name, entry)
            return entry

        return deco

    # --- plugins --------------------------------------------------------------------------

    def plugins(self) -> dict[str, EntryPoint]:
        """The group's entry points (read on first use), a clash with a built-in refused."""
        if self._plugins is None:
            self._plugins = {}
            for ep in entry_points(group=self.group):
                if ep.name in self._refs or ep.name in self._plugins:
                    log.warning(
                        f"plugin ignored: {_where(ep)} is named like a {self.kind} prb already "
                        f"has ({ep.name!r}); rename it in that package's entry points"
                    )
                    continue
                self._plugins[ep.name] = ep
        return self._plugins

    # --- reading --------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every name, built-ins first, a plugin that failed to load left out."""
        return [*self._refs, *(n for n in sorted(self.plugins()) if n not in self._failed)]

    def __contains__(self, name: object) -> bool:
        return name in self._refs or name in self.plugins()  # a failed one: `get` says why

    def _check(self, name: str, entry: object, where: str) -> T:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        want = " or ".join(t.__name__ for t in types)
        if len(types) == 1 and getattr(types[0], "_is_protocol", False):  # structural
            missing = [m for m in _members(types[0]) if not hasattr(entry, m)]
            if missing or (self.classes and not isinstance(entry, type)):
                what = f"lacks {', '.join(missing)}" if missing else "is not a class"
                raise RegistryError(f"{self.kind} {name!r} ({where}) {what}: not a {want}")
        elif self.classes:
            if not (isinstance(entry, type) and issubclass(entry, types)):
                raise RegistryError(f"{self.kind} {name!r} ({where}) is not a {want} class")
        elif not isinstance(entry, types):
            raise RegistryError(
                f"{self.kind} {name!r} ({where}) is a {type(entry).__name__}, not a {want}"
            )
        if self.named and getattr(entry, "name", name) != name:
            raise RegistryError(
                f"{self.kind} {name!r} ({where}) calls itself {entry.name!r}: "
                "register it under its own name"
            )
        return entry

    def get(self, name: str) -> T:
        """The entry called `name`, loaded and type-checked (UnknownName if there is none)."""
        if name in self._loaded:
            return self._loaded[name]
        if name not in self:
            known = self.names()
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownName(
                f"unknown {self.kind} {name!r}{hint}; known: {', '.join(known) or 'none'}"
            )
        if name in self._refs:
            entry = self._refs[name]
            if isinstance(entry, str):
                entry = resolve(entry)  # a built-in that fails to import is a bug: let it raise
            self._loaded[name] = self._check(name, entry, f"built into prb as {self._refs[name]!r}")
            return self._loaded[name]
        ep = self.plugins()[name]
        try:
            self._loaded[name] = self._unclaimed(name, self._check(name, ep.load(), _where(ep)), ep)
        except RegistryError:
            self._failed.add(name)
            raise
        except Exception as e:  # whatever a plugin's import raises is the plugin's problem
            self._failed.add(name)
            raise RegistryError(
                f"plugin failed to load: {_where(ep)}: {type(e).__name__}: {e}; fix or "
                "uninstall that package"
            ) from None
        return self._loaded[name]

    def _unclaimed(self, name: str, entry: T, ep: EntryPoint) -> T:
        """A plugin's entry, refused if it claims what another entry already holds."""
        if self.claims is None:
            return entry
        if self._taken is None:
            self._taken = dict(self.reserved)
            for own in self._refs:
                for claim in sorted(self.claims(self.get(own))):
                    self._taken.setdefault(claim, f"prb's {self.kind} entry {own!r}")
        mine = sorted(self.claims(entry))
        held = [(c, self._taken[c]) for c in mine if c in self._taken]
        if held:
            what = "; ".join(f"{c}, which {owner} holds" for c, owner in held)
            raise RegistryError(
                f"plugin refused: {_where(ep)} declares {what}; a plugin adds to prb, it never "
                "replaces: rename it in that package"
            )
        self._taken.update(dict.fromkeys(mine, f"plugin {self.kind} entry {name!r}"))
        return entry

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) for every entry, loaded; a plugin that fails costs one warning line
        and is left out."""
        out = []
        for name in self.names():
            try:
                out.append((name, self.get(name)))
            except RegistryError as e:
                if name in self._refs:
                    raise
                log.warning(str(e))
        return out

    def load_all(self) -> tuple[T, ...]:
        """Every entry, loaded (once), in `order`."""
        if self._all is None:
            out = [entry for _, entry in self.items()]
            self._all = tuple(sorted(out, key=self.order) if self.order else out)
        return self._all

    def __iter__(self) -> Iterator[T]:
        return iter(self.load_all())

    def __len__(self) -> int:
        return len(self.names())
