"""The run folder's lock: one live owner, named; stale locks taken over."""

import os
import subprocess
import sys

import pytest

from attnkit.train.lock import LOCK_FILE, FolderBusy, lock_folder


def test_a_second_owner_is_refused_with_the_pid_of_the_first(tmp_path):
    with lock_folder(tmp_path / "run") as folder:
        assert (folder / LOCK_FILE).read_text().strip().isdigit()
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from attnkit.train.lock import lock_folder\n"
                "try:\n  with lock_folder(sys.argv[1]): pass\n"
                "except ValueError as e: print(e)",
                str(folder),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert f"in use by another attnkit process (pid {os.getpid()})" in child.stdout
        with pytest.raises(FolderBusy, match=r"in use by another attnkit process \(pid \d+\)"):
            with lock_folder(folder):
                pass
    assert not (tmp_path / "run" / LOCK_FILE).exists()  # released
    with lock_folder(tmp_path / "run"):
        pass


def test_the_lock_of_a_killed_process_is_taken_over(tmp_path, caplog):
    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    (folder / LOCK_FILE).write_text(f"{dead}\n")  # as a SIGKILLed owner leaves it
    with caplog.at_level("INFO", logger="attnkit"), lock_folder(folder):
        assert f"taking over the lock of process {dead}" in caplog.text


def test_a_folder_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        ValueError,
        match=r"file/run: cannot use as a run folder \(Not a "
        r"directory\)",
    ):
        with lock_folder(tmp_path / "file" / "run"):
            pass


def test_a_folder_made_for_a_run_that_wrote_nothing_is_removed(tmp_path):
    with lock_folder(tmp_path / "empty"):
        pass
    assert not (tmp_path / "empty").exists()
    with lock_folder(tmp_path / "used") as folder:
        (folder / "history.json").write_text("[]")
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["history.json"]
