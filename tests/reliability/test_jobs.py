"""A job's error reaches its log with the traceback, never hangs Snakemake's worker thread, and long jobs
say how far they are; a killed write leaves nothing behind that survives the next one."""

import os
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from adsl.errors import AdslError
from adsl.io import atomic_path, stray_temporaries
from adsl.progress import progress
from adsl.workflow import run


def job(tmp_path, **params):
    return SimpleNamespace(
        rule="demo", input={}, output={}, params=params, wildcards={}, log=[str(tmp_path / "logs" / "demo.log")]
    )


def bad_input(value):
    raise AdslError(f"demo.yaml: value: {value} outside [0, 1]")


def broken(value):
    print("working on", value)
    return {}[value]


def in_thread(target):
    """Run ``target`` as Snakemake runs a ``run:`` block: in a worker thread; returns what it raised."""
    caught = []

    def body():
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 (SystemExit included: that was the hang)
            caught.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()
    return caught[0] if caught else None


def test_a_user_error_in_a_worker_thread_raises_instead_of_exiting(tmp_path, capsys):
    """sys.exit in Snakemake's worker thread left the scheduler waiting forever."""
    exc = in_thread(lambda: run(job(tmp_path, value=2), bad_input))
    assert isinstance(exc, AdslError) and not isinstance(exc, SystemExit)
    log = (tmp_path / "logs" / "demo.log").read_text()
    assert "rule demo: " in log and "adsl: demo.yaml: value: 2 outside [0, 1]" in log
    assert "Traceback (most recent call last)" in log  # the full error is in the log
    assert "demo.yaml: value: 2 outside [0, 1]" in capsys.readouterr().err


def test_a_user_error_in_a_script_process_exits_with_its_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run(job(tmp_path, value=3), bad_input)
    assert exc.value.code == 1
    assert "adsl: demo.yaml: value: 3 outside [0, 1]" in capsys.readouterr().err
    assert "Traceback" in (tmp_path / "logs" / "demo.log").read_text()


def test_any_other_error_is_in_the_log_with_its_traceback(tmp_path):
    exc = in_thread(lambda: run(job(tmp_path, value="x"), broken))
    assert isinstance(exc, KeyError)
    log = (tmp_path / "logs" / "demo.log").read_text()
    assert "working on x" in log and "KeyError: 'x'" in log and "in broken" in log and "failed after" in log


def test_a_good_job_says_when_it_is_done(tmp_path):
    run(job(tmp_path, value=0.5), lambda value: print("value", value))
    log = (tmp_path / "logs" / "demo.log").read_text().splitlines()
    assert log[1] == "value 0.5" and log[-1].startswith("done in ")


@pytest.mark.parametrize("n", [1, 3, 10, 37, 250])
def test_progress_lines_come_at_least_every_tenth(n, capsys):
    assert list(progress(range(n), "point")) == list(range(n))
    lines = capsys.readouterr().out.splitlines()
    done = [int(line.split()[1]) for line in lines]
    assert done[-1] == n and all(line.startswith("point ") and " of " + str(n) in line for line in lines)
    assert "elapsed" in lines[0] and "left" in lines[0]
    gaps = [b - a for a, b in zip([0, *done], done, strict=False)]
    assert max(gaps) <= max(1, -(-n // 10)) and len(lines) <= 10


def test_a_stray_temporary_of_a_killed_write_is_removed_by_the_next(tmp_path):
    target = tmp_path / "figures" / "fig12.pdf"
    target.parent.mkdir()
    fd, stray = tempfile.mkstemp(prefix=".fig12.pdf.", suffix=".pdf", dir=target.parent)  # as atomic_path names it
    os.close(fd)
    other = target.parent / ".fig13.pdf.abcdefgh.pdf"  # another target's: not ours to remove
    other.write_text("x")
    assert stray_temporaries(target) == [Path(stray)]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert sorted(p.name for p in target.parent.iterdir()) == [".fig13.pdf.abcdefgh.pdf", "fig12.pdf"]


def test_a_failed_write_keeps_the_earlier_output(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("good\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "good\n" and list(tmp_path.iterdir()) == [target]
