"""Shared fixtures: float64 by default for identity checks, fresh seeded generators."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def gen(request) -> torch.Generator:
    """A generator seeded from the test's name: fresh draws per test, reproducible across runs."""
    import zlib

    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def quick_record(tmp_path_factory):
    """``quick_record(name, seed=0)``: the record of simulate preset ``name`` in quick mode at ``seed``, run once
    per session with its plots drawn into a session folder (``record.plots`` name files there; the folder is
    ``quick_record.out``). Several test files judge the same quick run (its verdict, its rule, its controls):
    they share it instead of each running it again. Treat the record as read-only."""
    from expattn.catalogue.registry import RunContext
    from expattn.commands.checks import run_claim, select

    out = tmp_path_factory.mktemp("quick-presets")
    cache: dict[tuple[str, int], object] = {}

    def record(name: str, seed: int = 0):
        if (name, seed) not in cache:
            (claim,) = select("simulate", [name])
            folder = out / f"{name}-{seed}"
            folder.mkdir()
            cache[name, seed] = run_claim(claim, RunContext(seed=seed, out_dir=folder, quick=True))
        return cache[name, seed]

    record.out = out
    return record
