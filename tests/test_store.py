"""Stage files as the flow hands them between stages: `Records` reads the latest line per id
from disk on each pass instead of holding a stage in memory (bench/scale.py)."""

from __future__ import annotations

import pickle

import pytest

from pipeline.records import Dropped
from pipeline.store import Records, StageFile, StageFileError


def drop(rid: str, reason: str) -> Dropped:
    return Dropped(stage="pairs", id=rid, reason=reason, detail="")


def stage_file(tmp_path, *records: Dropped) -> StageFile:
    f = StageFile(tmp_path, "pairs", Dropped)
    with f.appender() as append:
        for r in records:
            append(r)
    return f


def by_id(d: Dropped) -> str:
    return d.id


def test_records_give_the_latest_line_per_id_in_file_order(tmp_path):
    f = stage_file(
        tmp_path,
        drop("a", "first"),
        drop("b", "only"),
        drop("a", "retried"),
        drop("c", "only"),
    )
    records = Records(f, by_id)
    assert [(r.id, r.reason) for r in records] == [("b", "only"), ("a", "retried"), ("c", "only")]
    assert len(records) == 3
    # read again from disk: a second pass sees the same records
    assert [r.id for r in records] == ["b", "a", "c"]
    # offsets read the same records back, in any order asked
    items = dict((r.id, offset) for offset, r in records.items())
    assert [r.reason for r in f.read_at([items["c"], items["a"]])] == ["only", "retried"]


def test_records_keep_only_wanted_ids(tmp_path):
    f = stage_file(tmp_path, drop("a", "x"), drop("stale", "from an older input"), drop("b", "y"))
    records = Records(f, by_id, wanted={"a", "b", "never-written"})
    assert [r.id for r in records] == ["a", "b"]
    assert len(records) == 2


def test_records_survive_pickling_for_shard_tasks(tmp_path):
    f = stage_file(tmp_path, drop("a", "x"), drop("b", "y"))
    copy = pickle.loads(pickle.dumps(Records(f, by_id, wanted={"b"})))
    assert [r.id for r in copy] == ["b"]
    part = pickle.loads(pickle.dumps(Records(f, by_id).subset({"a"})))  # a shard's slice
    assert [r.id for r in part] == ["a"]


def test_records_cut_a_torn_tail_and_name_a_broken_line(tmp_path):
    f = stage_file(tmp_path, drop("a", "x"), drop("b", "y"))
    with open(f.path, "ab") as out:
        out.write(b'{"stage": "pairs", "id": "c", "rea')  # a crash mid-write
    assert [r.id for r in Records(f, by_id)] == ["a", "b"]
    assert f.path.read_bytes().endswith(b"\n")

    with open(f.path, "ab") as out:
        out.write(b'{"stage": "pairs"}\n')
    with pytest.raises(StageFileError, match=r"pairs\.jsonl:3: not a valid Dropped"):
        list(Records(f, by_id))


def test_a_missing_stage_file_is_empty(tmp_path):
    records = Records(StageFile(tmp_path, "rubrics", Dropped), by_id)
    assert list(records) == [] and len(records) == 0


def test_a_line_rewritten_after_indexing_is_named_by_its_byte_offset(tmp_path):
    f = stage_file(tmp_path, drop("a", "x"), drop("b", "y"))
    records = Records(f, by_id)
    offset_b = records.index()["b"]
    text = f.path.read_bytes()
    f.path.write_bytes(text[:offset_b] + b'{"id": "b"}\n')  # changed under a running build
    with pytest.raises(StageFileError, match=rf"pairs\.jsonl \(byte {offset_b}\): not a valid"):
        list(records)
