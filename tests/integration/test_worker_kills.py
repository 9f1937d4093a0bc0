"""A process whose worker pool is running killed with kill -9: its workers end and its semaphores are removed
without a ``leaked semaphore`` warning on the terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import time
    from expattn.commands.workers import side_by_side

    class Shown:
        def describe(self, item, text): print("running", flush=True)
        def advance(self): pass
        def finish(self, item): pass
        def died(self, item, how): pass

    def slow(item, tell):
        tell.describe("sleeping")
        time.sleep(120)

    if __name__ == "__main__":
        side_by_side(slow, [1, 2], 2, Shown())
''')


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="kill -9 is POSIX")
def test_kill_9_of_the_parent_leaves_no_semaphore_warning(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "running"  # a worker is inside its item
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)  # stderr closes when the workers and the tracker have ended
    assert proc.returncode == -signal.SIGKILL
    assert "leaked semaphore" not in err and err.strip() == "", err
