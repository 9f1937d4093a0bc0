"""``passes.plan`` against the host's free memory keeps back the allocator's slack: the bfloat16 Qwen2.5 1.5B twin's
probe, planned as one pass into free memory its estimate just fitted, was killed by the kernel
(benchmarks/RESULTS.md)."""

from __future__ import annotations

import pytest

from expattn.probes.footprint import footprint
from expattn.probes.passes import HOST_SLACK, plan

GIB = 2**30
# the probe of Qwen2.5-Coder 1.5B in bfloat16 at 8,192 tokens: 15.2 GiB beside the weights (14.0 before the float64
# copies of its attention modules that E5's and E7's replays keep were counted)
QWEN_15B = footprint(1536, 28, 12, head_dim=128, kv_heads=2, intermediate=8960, dtype="bfloat16", tokens=8192)


@pytest.fixture
def free(monkeypatch):
    """Stand in for the device's free memory: ``free(n)`` makes it ``n`` bytes."""
    def set_free(n: int) -> None:
        monkeypatch.setattr("expattn.memory.available_bytes", lambda device: n)
    return set_free


def test_on_the_cpu_a_run_its_estimate_barely_fits_goes_in_passes(free):
    peak = QWEN_15B.peak()
    assert 14.7 * GIB < peak < 15.7 * GIB
    free(peak + GIB)  # room for the estimate, not for the 3 GiB the resident size ran above it
    groups = plan(QWEN_15B, "cpu", 8192, None, "qwen")
    assert len(groups) >= 2 and sorted(h for g in groups for h in g) == sorted(QWEN_15B.statistics)
    assert all(QWEN_15B.peak(g) <= peak + GIB - HOST_SLACK for g in groups)
    free(peak + HOST_SLACK + GIB)  # room for both: one pass
    assert plan(QWEN_15B, "cpu", 8192, None, "qwen") == [tuple(QWEN_15B.statistics)]


def test_the_slack_is_half_a_small_runs_estimate_and_not_kept_off_the_host_or_from_a_budget(free):
    small = footprint(64, 2, 4, dtype="float32", tokens=512, seq_len=32, detail_sequences=2, replicates=20)
    free(int(small.peak() * 1.4))  # fits with 0.4 of slack, not with half the estimate
    assert len(plan(small, "cpu", 512, None, "tiny")) >= 2
    free(int(small.peak() * 1.6))
    assert len(plan(small, "cpu", 512, None, "tiny")) == 1
    free(QWEN_15B.peak() + GIB)
    assert len(plan(QWEN_15B, "meta", 8192, None, "qwen")) == 1  # an accelerator's allocator: no host slack
    free(10**15)
    assert len(plan(QWEN_15B, "cpu", 8192, QWEN_15B.peak() + GIB, "qwen")) == 1  # a stated budget is the user's


def test_a_refusal_names_the_free_memory_and_the_slack_kept(free):
    free(QWEN_15B.peak() // 4)
    with pytest.raises(ValueError, match=r"free memory of cpu, 3\.5 GiB of it kept for the allocator's slack"):
        plan(QWEN_15B, "cpu", 8192, None, "qwen")


MEMINFO = "MemTotal:       24683784 kB\nMemFree:          227124 kB\nMemAvailable:   {available} kB\n"


@pytest.mark.parametrize(("available_gib", "resident_gib", "free_gib"), [
    (15.0, 11.0, 23.54 - 11.0),  # the kernel counts more as available than the machine has beside this process
    (6.0, 11.0, 6.0),  # other processes hold the rest: MemAvailable is the bound
    (15.0, 24.0, 0.0),  # never below zero
])
def test_the_hosts_free_memory_is_never_more_than_what_this_process_does_not_hold(available_gib, resident_gib,
                                                                                  free_gib):
    from expattn.memory import host_available

    meminfo = MEMINFO.format(available=int(available_gib * 2**20))
    status = f"Name:\tpython\nVmHWM:\t{int(resident_gib * 2**20) + 5} kB\nVmRSS:\t{int(resident_gib * 2**20)} kB\n"
    assert host_available(meminfo, status) == pytest.approx(free_gib * GIB, abs=0.01 * GIB)


def test_a_missing_field_is_named():
    from expattn.memory import host_available

    with pytest.raises(ValueError, match="no VmRSS"):
        host_available(MEMINFO.format(available=1), "Name:\tpython\n")


def test_e4_and_e9_go_in_one_pass_when_they_fit_together_and_apart_when_they_do_not(free):
    # E4 and E9 share one analysis within a pass: in two passes it is computed twice
    free(QWEN_15B.peak(("E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8")) + HOST_SLACK)  # in order: E9 apart
    groups = plan(QWEN_15B, "cpu", 8192, None, "qwen")
    assert len(groups) >= 2 and sorted(h for g in groups for h in g) == sorted(QWEN_15B.statistics)
    assert any({"E4", "E9"} <= set(g) for g in groups)
    assert all(QWEN_15B.peak(g) <= QWEN_15B.peak(tuple(QWEN_15B.statistics)) for g in groups)
    some = footprint(1536, 28, 12, ("E4", "E5", "E9"), head_dim=128, kv_heads=2, dtype="bfloat16", tokens=8192)
    free(10**15)  # a budget E4 alone fits and the pair does not: each in a pass of its own
    groups = plan(some, "cpu", 8192, (some.peak(("E4",)) + some.peak(("E4", "E9"))) // 2, "qwen")
    assert sorted(h for g in groups for h in g) == ["E4", "E5", "E9"]
    assert not any({"E4", "E9"} <= set(g) for g in groups)
