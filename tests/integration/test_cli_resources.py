"""Resource exhaustion and signals: runs too large for memory are refused up front (needed vs available),
text files are read with a size limit, plots reach matplotlib as plain text, SIGTERM cleans up like Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_checks import one_line_error
from tiny_models import export_tiny_lm
from typer.testing import CliRunner

from expattn.cli import app
from expattn.textfiles import read_text_limited


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--batch", str(10**9)],
        ["train", "--dim", str(10**6), "--heads", "1"],
        ["probe", "--tokens", str(10**13)],
    ],
)
def test_runs_too_large_for_memory_are_refused_before_any_work(tmp_path, args):
    out = tmp_path / "o"
    one_line_error(CliRunner().invoke(app, [*args, "--out", str(out)]), "needs at least", "GiB", "available")
    assert not out.exists()


def test_devices_and_pipes_are_not_read_as_text(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    one_line_error(CliRunner().invoke(app, ["probe", "--text", "/dev/zero", "--out", str(tmp_path / "p")]),
                    "not a regular file")
    one_line_error(CliRunner().invoke(app, ["train", "--corpus", "/dev/zero", "--out", str(tmp_path / "t")]),
                    "/dev/zero")
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_text_limited(fifo)  # returns at once: a pipe without a writer would block a plain read


def test_text_larger_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("abc" * 100)
    assert read_text_limited(path, limit=300) == "abc" * 100
    path.write_text("abc" * 100 + "d")
    with pytest.raises(ValueError, match="holds 301 bytes, more than the limit of 300 bytes"):
        read_text_limited(path, limit=300)


def test_user_strings_reach_matplotlib_as_plain_text(tmp_path):
    from expattn.results.plotting import plain_label, pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots()
    name = "mm$\\bad{$"  # unescaped, matplotlib's mathtext parser raises ValueError on it
    ax.set_title(f"E1 {plain_label(name)}: expansion")
    assert save_figure(fig, tmp_path, "t.png") == ["t.png"] and (tmp_path / "t.png").stat().st_size > 0
    fig, ax = plt.subplots()
    ax.set_title(f"E1 {name}")
    with pytest.raises(ValueError):
        save_figure(fig, tmp_path, "u.png")


def _tiny_model(folder):
    export_tiny_lm(folder, "\n abc", layers=1, context=16)
    (folder.parent / "t.txt").write_text("ab c\n" * 400)
    return ["probe", "--model", str(folder), "--text", str(folder.parent / "t.txt"), "--tokens", "256",
            "--seq-len", "16", "--hypotheses", "E1,E3"]


def test_a_model_folder_named_like_tex_is_probed(tmp_path):
    args = _tiny_model(tmp_path / "mm$\\bad{$" / "model")
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    records = json.loads((tmp_path / "p" / "results.json").read_text())["records"]
    assert [r["verdict"] != "skipped" and len(r["plots"]) == 1 for r in records] == [True, True]
    assert all((tmp_path / "p" / r["plots"][0]).stat().st_size > 0 for r in records)


def test_a_failing_plot_is_an_error_not_a_skipped_record(tmp_path, monkeypatch):
    """A full disk while a probe writes its plots ends the command with a one-line error and no output."""
    args = _tiny_model(tmp_path / "model")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("expattn.probes.hypotheses.base.save_figure", full)
    out = tmp_path / "p"
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    one_line_error(result, "No space left on device")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".p.")]


@pytest.mark.slow
def test_sigterm_cleans_up_like_sigint(tmp_path):
    out = tmp_path / "sim"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "expattn.cli", "simulate", "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".sim.tmp-") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "simulate ended before it could be interrupted"
    time.sleep(0.5)  # inside the presets
    assert any(p.name.startswith(".sim.tmp-") for p in tmp_path.iterdir())
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read().decode()[-2000:]
    assert list(tmp_path.iterdir()) == []  # no staging folder, no partial output
