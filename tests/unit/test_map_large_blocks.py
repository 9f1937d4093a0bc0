"""Large blocks mapped apart where memory is tight (``overlap.map_when_tight``): freed 2 MiB blocks between live
small ones stay resident in glibc's heaps by default and go back to the system once the threshold is fixed."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
import textwrap

import pytest

from expattn.probes import overlap

FRAGMENTS = textwrap.dedent("""
    import sys, torch
    from expattn.probes.overlap import map_large_blocks
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096
    if sys.argv[1] == "mapped":
        assert map_large_blocks()
    kept, before = [], rss()
    for _ in range(3):
        blocks = []
        for _ in range(64):
            blocks.append(torch.ones(2**19))  # 2 MiB, freed below
            kept.append(torch.ones(2**10))  # 4 KiB, kept between them
        del blocks
    print(rss() - before)
""")


def _left(mode: str) -> int:
    """Bytes a fresh process still holds after freeing 384 MiB of 2 MiB blocks among live small ones."""
    done = subprocess.run([sys.executable, "-c", FRAGMENTS, mode], capture_output=True, text=True, timeout=600,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not ctypes.util.find_library("c") or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")),
                                                                      "mallopt"), reason="needs glibc's mallopt")
def test_freed_large_blocks_go_back_once_they_are_mapped_apart():
    assert _left("plain") > 64 * 2**20  # the control: glibc's default keeps them (219.6 MiB when written)
    assert _left("mapped") < 16 * 2**20  # mapped apart: given back (1.9 MiB when written)


def test_only_a_run_above_half_the_hosts_memory_maps_its_blocks_apart(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(overlap, "map_large_blocks", lambda: calls.append(1) or True)
    monkeypatch.setattr(overlap.memory, "host_total", lambda: 10 * 2**30)
    assert not overlap.map_when_tight(5 * 2**30) and calls == []
    assert overlap.map_when_tight(5 * 2**30 + 1) and calls == [1]
    monkeypatch.setattr(overlap.memory, "host_total", lambda: None)  # no /proc: nothing known, nothing changed
    assert not overlap.map_when_tight(2**40) and calls == [1]
