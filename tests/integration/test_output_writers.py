"""Writers of output folders and files: one writer at a time, one rule for what is already there, and
the leftovers of killed writers removed by the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from tiny_models import export_tiny_lm
from typer.testing import CliRunner

from expattn.cli import app
from expattn.results.files import staged, staging_dir
from expattn.results.lock import LOCK, hold_output, hold_output_file
from expattn.terminal import interrupt_on_sigterm

SIMULATE = ["simulate", "--only", "custom", "--steps", "2", "--tokens", "8", "--dim", "2"]
TRAIN = ["train", "--layers", "1", "--dim", "8", "--heads", "2", "--context", "8", "--batch", "4", "--iters", "2",
         "--eval-every", "2", "--ckpt-every", "2", "--no-progress", "--device", "cpu"]


def _one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert all(f in lines[0] for f in fragments), result.output


@pytest.fixture
def corpus(gen, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join("abcdef \n"[i] for i in torch.randint(0, 8, (2000,), generator=gen).tolist()))
    return path


@pytest.fixture
def probe_args(tmp_path):
    folder = tmp_path / "model"
    export_tiny_lm(folder, "\n abc", layers=1, context=16)
    (tmp_path / "t.txt").write_text("ab c\n" * 400)
    return ["probe", "--model", str(folder), "--text", str(tmp_path / "t.txt"), "--tokens", "256",
            "--seq-len", "16", "--hypotheses", "E1"]


def _commands(tmp_path, corpus, probe_args):
    return {"probe": probe_args, "simulate": SIMULATE, "train": [*TRAIN, "--corpus", str(corpus)],
            "report": ["report", "--stages", "verify", "--quick"]}


@pytest.mark.parametrize("command", ["probe", "simulate", "train", "report"])
def test_a_second_writer_of_a_folder_gets_one_line_error(tmp_path, corpus, probe_args, command):
    out = tmp_path / "o"
    args = _commands(tmp_path, corpus, probe_args)[command]
    with hold_output(out):  # another writer, as far as the kernel is concerned
        _one_line_error(CliRunner().invoke(app, [*args, "--out", str(out)]), "being written by another process")
        assert sorted(os.listdir(out)) == [LOCK]
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]  # no staging folder either
    assert not out.exists()  # the lock and the folder it made are gone with the holder


def test_a_second_writer_of_a_json_file_gets_one_line_error(tmp_path):
    path = tmp_path / "v.json"
    with hold_output_file(path):
        _one_line_error(CliRunner().invoke(app, ["verify", "--only", "A3", "--json", str(path)]),
                        "being written by another process")
    assert list(tmp_path.iterdir()) == []  # refused before any check ran; the lock went with its holder


def test_two_concurrent_probes_into_one_folder_give_one_result_and_one_error(tmp_path, probe_args):
    out = tmp_path / "o"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "expattn.cli", *probe_args, "--out", str(out)]
    procs = [subprocess.Popen([*cmd, "--seed", str(seed)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for seed in (1, 2)]
    results = [(p.wait(timeout=300), p.stdout.read().decode(), p.stderr.read().decode()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 2], results
    error = next(err for code, _, err in results if code == 2)
    lines = [line for line in error.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), error
    assert "being written by another process" in lines[0] or "not empty" in lines[0]
    assert sum("results in" in out_text for _, out_text, _ in results) == 1  # only the writer says it wrote


@pytest.mark.parametrize("command", ["probe", "simulate", "train", "report"])
def test_a_non_empty_folder_is_refused_unless_overwrite(tmp_path, corpus, probe_args, command):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = [*_commands(tmp_path, corpus, probe_args)[command], "--out", str(out)]
    _one_line_error(CliRunner().invoke(app, args), "not empty", "notes.txt", "--overwrite")
    assert sorted(os.listdir(out)) == ["notes.txt"]
    if command == "report":
        return  # writing a whole report is test_report_run's
    result = CliRunner().invoke(app, [*args, "--overwrite"])
    assert result.exit_code == 0, result.output
    assert (out / "notes.txt").read_text() == "mine" and LOCK not in os.listdir(out)


def test_train_overwrite_starts_a_new_run_and_resume_continues_it(tmp_path, corpus):
    out = tmp_path / "o"
    args = [*TRAIN, "--corpus", str(corpus), "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    _one_line_error(CliRunner().invoke(app, args), "already holds a run", "--resume", "--overwrite")
    _one_line_error(CliRunner().invoke(app, [*args, "--resume", "--overwrite"]), "not both")
    (out / "notes.txt").write_text("mine")
    result = CliRunner().invoke(app, [*args, "--overwrite"])
    assert result.exit_code == 0, result.output
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1  # a new run, not appended to the old one
    assert (out / "notes.txt").read_text() == "mine"
    assert CliRunner().invoke(app, [*args, "--resume"]).exit_code == 0


def test_an_existing_json_file_is_refused_unless_overwrite(tmp_path):
    path = tmp_path / "v.json"
    path.write_text("mine")
    args = ["verify", "--only", "A3", "--json", str(path)]
    _one_line_error(CliRunner().invoke(app, args), "already exists", "--overwrite")
    assert path.read_text() == "mine"
    assert CliRunner().invoke(app, [*args, "--overwrite"]).exit_code == 0
    # the results and their wall clock beside them (v.timings.json), no staging file left behind
    assert path.read_text().startswith("{") and sorted(os.listdir(tmp_path)) == ["v.json", "v.timings.json"]


def test_a_later_writer_removes_the_staging_folder_of_a_killed_one(tmp_path):
    out = tmp_path / "sim"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "expattn.cli", "simulate", "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not [p for p in tmp_path.iterdir() if p.name.startswith(".sim.tmp-")] and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert any(name.startswith(".sim.tmp-") for name in left), left
    other = staging_dir(tmp_path / "simx")  # another output's staging folder is not this writer's to remove
    result = CliRunner().invoke(app, [*SIMULATE, "--out", str(out), "--overwrite"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["sim", other.name])
    assert sorted(os.listdir(out)) == ["custom.png", "results.json"]


def test_a_probe_removes_the_staging_folder_a_killed_probe_left(tmp_path, probe_args):
    out = tmp_path / "o"
    left = staging_dir(out)  # named as a killed probe's; no process holds the lock
    (left / "results.json").write_text("{")
    result = CliRunner().invoke(app, [*probe_args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not left.exists() and (out / "results.json").is_file()


def test_leftovers_inside_the_folder_are_removed_under_the_lock(tmp_path):
    out = tmp_path / "o"
    (out / ".plots.old-abcd_123").mkdir(parents=True)
    (out / ".results.json.k2j3h4g5").write_text("{")
    (out / ".keep.me").write_text("mine")
    with hold_output(out):
        assert sorted(os.listdir(out)) == sorted([LOCK, ".keep.me"])


def test_sigterm_exits_143_and_removes_the_staging_folder(tmp_path):
    interrupt_on_sigterm()
    try:
        with pytest.raises(SystemExit) as stop, staged(tmp_path / "o"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in the main thread before this ends
        assert stop.value.code == 128 + signal.SIGTERM
        assert list(tmp_path.iterdir()) == []
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
