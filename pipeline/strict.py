"""YAML and JSON as prb reads what a user hands it (a leaf): a key given twice in one mapping
is an error naming its line, never a silent override, and YAML aliases are bounded (a 375-byte
config of nested aliases expanded into millions of values and hung prb at 100% CPU)."""

from __future__ import annotations

import json

import yaml

MAX_NODES = 100_000  # values once aliases are expanded: a config is a page, a persona file data


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes `node` becomes with every alias expanded (an alias is the same node
    object again, so each node is counted once and its size reused)."""
    if id(node) not in sizes:
        children = node.value if isinstance(node.value, list) else []
        parts = [x for child in children for x in (child if isinstance(child, tuple) else (child,))]
        sizes[id(node)] = 1 + sum(_expanded(x, sizes) for x in parts)
    return sizes[id(node)]


class StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader refusing a key given twice, and a document whose aliases expand it past
    MAX_NODES values (refused before anything is built from it)."""

    def compose_document(self):
        node = super().compose_document()
        if node is not None and _expanded(node, {}) > MAX_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"its aliases expand to over {MAX_NODES:,} values: write the values out",
                node.start_mark,
            )
        return node


def _unique_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            taken = key in first
        except TypeError:  # a list or mapping as a key: no setting or field is named so
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a name, not a list or mapping", key_node.start_mark
            ) from None
        if taken:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"the key {key!r} is given twice (first on line {first[key]})",
                key_node.start_mark,
            )
        first[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str):
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader)


def _unique_object(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def load_json(text: str | bytes):
    """json.loads refusing a key given twice (ValueError, as for broken JSON)."""
    return json.loads(text, object_pairs_hook=_unique_object)
