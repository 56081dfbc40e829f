"""host/out_lock.py: one sweep per output folder. The lock names its holder, is removed on every path out of the
body, and a lock whose PID no longer runs is taken over in one line."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from host.errors import KbenchError, SpecError
from host.out_lock import LOCK_NAME, UNREADABLE_LOCK_S, Holder, read_holder, sweep_lock

HOST = socket.gethostname()


def free_pid() -> int:
    """A PID no process holds now (counted down from the kernel's largest), as a killed sweep's lock leaves."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_the_lock_names_its_holder_while_held_and_is_gone_after(tmp_path):
    with sweep_lock(tmp_path, "kernels.sweep") as lock:
        assert lock == tmp_path / LOCK_NAME
        assert lock.read_text() == f"{os.getpid()} {HOST} kernels.sweep\n"
        assert read_holder(lock) == Holder(os.getpid(), HOST, "kernels.sweep")
    assert not lock.exists()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, KbenchError, RuntimeError])
def test_the_lock_is_released_however_the_body_ends(tmp_path, stop):
    with pytest.raises(stop), sweep_lock(tmp_path, "host.compare"):
        raise stop()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content,named", [
    ("{pid} {host} host.compare\n", "host.compare, PID {pid} on {host}"),
    ("{pid} {host} codesign explore\n", "codesign explore, PID {pid} on {host}"),  # a tool name of two words
    ("{pid}\n", "PID {pid}"),  # an older explore's lock
    ("{dead} elsewhere.example host.compare\n", "host.compare, PID {dead} on elsewhere.example"),  # another host's
    ("", "no PID"),  # just made: its holder has not written its line yet
])
def test_a_held_lock_refuses_a_second_sweep_naming_the_holder(tmp_path, content, named):
    values = {"pid": os.getpid(), "host": HOST, "dead": free_pid()}
    lock = tmp_path / LOCK_NAME
    lock.write_text(content.format(**values))
    with pytest.raises(KbenchError) as caught, sweep_lock(tmp_path, "kernels.sweep"):
        pytest.fail("a second sweep ran")
    assert not isinstance(caught.value, SpecError)  # held is not a bad argument: exit 1
    assert str(caught.value) == (f"--out {tmp_path}: another sweep is writing there ({named.format(**values)}, "
                                 f"{lock})")
    assert lock.read_text() == content.format(**values)  # still the holder's


@pytest.mark.parametrize("content,age_s,why", [
    ("{dead} {host} host.compare\n", 0, "PID {dead} of host.compare is not running"),
    ("{dead}\n", 0, "PID {dead} is not running"),
    ("", UNREADABLE_LOCK_S + 50, "it holds no PID"),  # a sweep killed between making the file and writing it
])
def test_a_stale_lock_is_taken_over_in_one_line(tmp_path, capsys, content, age_s, why):
    dead = free_pid()
    lock = tmp_path / LOCK_NAME
    lock.write_text(content.format(dead=dead, host=HOST))
    os.utime(lock, (time.time() - age_s, time.time() - age_s))
    with sweep_lock(tmp_path, "kernels.sweep"):
        assert read_holder(lock) == Holder(os.getpid(), HOST, "kernels.sweep")
    assert capsys.readouterr().err == (f"kbench: kernels.sweep: took over the stale lock {lock} "
                                       f"({why.format(dead=dead)})\n")
    assert list(tmp_path.iterdir()) == []  # no lock, nothing moved aside left behind


def test_a_lock_made_by_another_sweep_meanwhile_is_not_removed(tmp_path):
    """Should the file be replaced while the body runs (a hand deleting it, another sweep locking then), the end
    removes only the lock this sweep made."""
    lock = tmp_path / LOCK_NAME
    with sweep_lock(tmp_path, "host.compare"):
        lock.unlink()
        lock.write_text("1 elsewhere.example host.compare\n")
    assert lock.read_text() == "1 elsewhere.example host.compare\n"


def test_a_folder_that_cannot_be_written_in_is_a_bad_argument(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(SpecError, match=rf"^--out {missing}: cannot write in it \(No such file or directory\)$"), \
            sweep_lock(missing, "host.compare"):
        pytest.fail("the body ran")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")
def test_a_read_only_folder_is_a_bad_argument(tmp_path):
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(SpecError, match="cannot write in it"), sweep_lock(tmp_path, "host.compare"):
            pytest.fail("the body ran")
    finally:
        tmp_path.chmod(0o755)


def test_a_lock_that_is_a_folder_is_a_bad_argument_naming_it(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    with (pytest.raises(SpecError, match=rf"{LOCK_NAME} is a folder, not a lock file: remove it"),
          sweep_lock(tmp_path, "host.compare")):
        pass
    assert (tmp_path / LOCK_NAME).is_dir()


@pytest.mark.parametrize("content", ["0 somewhere host.compare\n", f"{10**30} {HOST}\n", "hello there\n"])
def test_a_lock_without_a_usable_pid_names_no_one_and_goes_stale_by_age(tmp_path, capsys, content):
    lock = tmp_path / LOCK_NAME
    lock.write_text(content)
    assert read_holder(lock) == Holder(None)
    with (pytest.raises(KbenchError, match=r"another sweep is writing there \(no PID, "),
          sweep_lock(tmp_path, "host.compare")):
        pass
    old = time.time() - UNREADABLE_LOCK_S - 5
    os.utime(lock, (old, old))
    with sweep_lock(tmp_path, "host.compare"):
        pass
    assert "it holds no PID" in capsys.readouterr().err


def test_a_full_disk_when_the_lock_is_written_is_one_line_and_leaves_no_lock(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("host.out_lock.os.write", full)
    with (pytest.raises(KbenchError, match=r"cannot write the lock .* \(No space left on device\); nothing"),
          sweep_lock(tmp_path, "host.compare")):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_file_system_is_named_as_such(tmp_path, monkeypatch):
    from host.cli_common import output_folder

    class ReadOnly:
        f_flag = os.ST_RDONLY
    monkeypatch.setattr("host.cli_common.os.access", lambda path, mode: False)
    monkeypatch.setattr("host.cli_common.os.statvfs", lambda path: ReadOnly())
    with pytest.raises(SpecError, match=r"cannot write in it \(a read-only file system\)"):
        output_folder(tmp_path)
