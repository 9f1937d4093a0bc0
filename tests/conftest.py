"""Shared fixtures: float64 by default for identity checks, fresh seeded generators."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def gen(request) -> torch.Generator:
    """A generator seeded from the test's name: fresh draws per test, reproducible across runs."""
    import zlib

    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))
