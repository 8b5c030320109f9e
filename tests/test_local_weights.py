"""The local models' weights (issue 37): Qwen2.5-Coder-1.5B ships in 22 part packages that are
joined once and hash-checked; a missing part or a wrong hash is one clear line and leaves no
file behind. Tested on small part packages made here (CI does not download the 1.1 GB)."""

from __future__ import annotations

import hashlib
import sys

import pytest

from pipeline.config import ConfigError, load_config
from pipeline.llm import local


def fake_parts(root, chunks: list[bytes]) -> local.LocalModel:
    names = []
    for i, chunk in enumerate(chunks, 1):
        package = f"prbtest_part{i}"
        (root / package / "data").mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        names.append(package)
    whole = b"".join(chunks)
    return local.LocalModel(
        "fake-3part",
        "fake.gguf",
        hashlib.sha256(whole).hexdigest(),
        len(whole),
        tuple(names),
        "a test model",
    )


@pytest.fixture
def parts_on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PRB_MODELS_DIR", str(tmp_path / "models"))
    yield tmp_path / "site"
    for name in [m for m in sys.modules if m.startswith("prbtest_part")]:
        del sys.modules[name]


def test_parts_are_joined_in_order_and_hash_checked(parts_on_path, tmp_path):
    m = fake_parts(parts_on_path, [b"GGUF" + b"a" * 1000, b"b" * 10, b"c" * 7])
    path = local.assemble(m)
    assert path == tmp_path / "models" / "fake.gguf"
    assert path.read_bytes() == b"GGUF" + b"a" * 1000 + b"b" * 10 + b"c" * 7
    assert local.verified_digest(path, m) == m.sha256
    path.write_bytes(b"tampered")  # the stamp no longer matches: hashed again, refused
    with pytest.raises(local.LocalModelError, match="sha256 .* is not fake-3part's"):
        local.verified_digest(path, m)


def test_a_wrong_or_missing_part_is_one_line_and_leaves_no_file(parts_on_path, tmp_path):
    m = fake_parts(parts_on_path, [b"x" * 50, b"y" * 50, b"z" * 50])
    wrong = local.LocalModel(m.name, m.gguf, "0" * 64, m.size, m.parts, m.about)
    with pytest.raises(local.LocalModelError) as e:
        local.assemble(wrong)
    assert "reinstall the part packages" in str(e.value) and "\n" not in str(e.value)
    assert not list((tmp_path / "models").iterdir())  # no partial file, no wrong file
    missing = local.LocalModel(
        m.name, m.gguf, m.sha256, m.size, (*m.parts, "prbtest_part_absent"), m.about
    )
    with pytest.raises(local.LocalModelError, match="not installed \\(prbtest-part-absent\\)"):
        local.assemble(missing)
    assert not list((tmp_path / "models").iterdir())


def test_the_server_generates_on_one_thread_and_reads_prompts_on_two_by_default(monkeypatch):
    pytest.importorskip("llama_cpp.server")
    monkeypatch.setattr(local, "BATCH_THREADS", 2)
    cmd = local.command(local.Path("/m.gguf"), 8080, "m")
    assert cmd[cmd.index("--n_threads") + 1] == "1"
    assert cmd[cmd.index("--n_threads_batch") + 1] == "2"
    cmd = local.command(local.Path("/m.gguf"), 8080, "m", threads=2, batch_threads=1)
    assert (cmd[cmd.index("--n_threads") + 1], cmd[cmd.index("--n_threads_batch") + 1]) == (
        "2",
        "1",
    )


def test_model_local_names_a_known_model_and_is_execution_only():
    cfg = load_config(None, model__local="smollm2-135m", model__local_threads=2)
    assert cfg.model.local == "smollm2-135m"
    assert "local" not in cfg.recorded()["model"] and "local_threads" not in cfg.recorded()["model"]
    with pytest.raises(ConfigError, match="unknown local model 'gpt-5'"):
        load_config(None, model__local="gpt-5")
    assert local.spec(None).name == "qwen2.5-1.5b"


def test_a_hand_written_stamp_beside_other_bytes_is_not_trusted(parts_on_path, tmp_path):
    """A file of the pinned size with a stamp written by hand (its size and modification time
    copied) was accepted with the pinned hash printed: the file was never hashed (issue 48)."""
    import json
    import os

    m = fake_parts(parts_on_path, [b"GGUF" + b"a" * 100, b"b" * 10])
    fake = tmp_path / "models" / "fake.gguf"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"\0" * m.size)
    st = fake.stat()
    forged = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": m.sha256}
    local._stamp_path(fake).write_text(json.dumps(forged))
    with pytest.raises(local.LocalModelError, match="is not fake-3part's"):
        local.verified_digest(fake, m)
    # a stamp copied from the real file's identity fields but for another inode: not trusted
    real = local.assemble(m, out=tmp_path / "real.gguf")
    fake.write_bytes(b"\0" * m.size)
    os.utime(fake, ns=(real.stat().st_atime_ns, real.stat().st_mtime_ns))
    local._stamp_path(fake).write_text(local._stamp_path(real).read_text())
    with pytest.raises(local.LocalModelError, match="is not fake-3part's"):
        local.verified_digest(fake, m)
    assert local.verified_digest(real, m) == m.sha256  # the real stamp still spares a hash
