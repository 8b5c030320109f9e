"""Hostile round 5 (issue 48): what a hostile or careless user found, one test per class."""

from __future__ import annotations

import json
import time

import pytest

from pipeline.config import ConfigError, load_config
from pipeline.personas.files import scan_records

POST = {"id": "a", "category": "c", "text": "t"}
ALIAS_BOMB = """a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def test_a_config_of_nested_aliases_is_refused_in_a_blink(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 400
    start = time.monotonic()
    said = r"bomb.yaml: malformed YAML at line 1: its aliases expand to over 100,000"
    with pytest.raises(ConfigError, match=said):
        load_config(bomb)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("key", ["[a, b]", "{a: 1}"])
def test_a_list_or_mapping_as_a_config_key_is_one_line(tmp_path, key):
    config = tmp_path / "odd.yaml"
    config.write_text(f"run_id: a\n{key}: 1\n")
    with pytest.raises(ConfigError, match="odd.yaml: malformed YAML at line 2: a key must be a"):
        load_config(config)


def test_a_persona_record_with_a_key_twice_is_refused_naming_the_line(tmp_path):
    persona = {"persona_id": "p1", "category": "c", "profile": [POST]}
    line = json.dumps(persona)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(line + "\n" + line[:-1] + ', "name": "Ann", "name": "Bob"}\n')
    records, problems = scan_records(twice)
    assert len(records) == 1
    assert problems == [f"{twice}:2: the key 'name' is given twice: keep one"]
    yaml_twice = tmp_path / "twice.yaml"
    yaml_twice.write_text("- persona_id: p1\n  name: Ann\n  name: Bob\n")
    _, problems = scan_records(yaml_twice)
    assert len(problems) == 1 and "the key 'name' is given twice" in problems[0], problems


def test_a_persona_jsonl_with_a_byte_order_mark_reads_like_csv_and_json_do(tmp_path):
    persona = {"persona_id": "p1", "category": "c", "profile": [POST]}
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(persona).encode() + b"\n")
    records, problems = scan_records(bom)
    assert problems == [] and records[0][1]["persona_id"] == "p1"
