"""Issue 48: the local backend's lock directory must be this user's alone, and nothing in it is followed.

It used to be a fixed `/tmp/kubetrain-loopback-<uid>`, accepted whoever made it, with `next-slot`
opened through symbolic links: another user could point it at one of your files, which your next
local run overwrote with a slot number; a plain file at that path made every local run die with a
traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubetrain.backends.local.addresses import allocate_block, default_lock_dir
from kubetrain.errors import BackendError


def test_the_default_lock_dir_is_in_the_users_runtime_dir_or_home_never_a_fixed_name_in_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_lock_dir() == runtime / "kubetrain-loopback"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_lock_dir() == tmp_path / "home" / ".kubetrain" / "loopback"
    # A runtime directory others can write is no private place: the home's is used instead.
    runtime.chmod(0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert default_lock_dir() == tmp_path / "home" / ".kubetrain" / "loopback"


def test_a_symlinked_counter_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    (locks / "next-slot").symlink_to(victim)
    with pytest.raises(BackendError, match=r"next-slot is a symbolic link; kubetrain never follows links there"):
        allocate_block(locks)
    assert victim.read_text() == "precious\n"


def test_a_symlinked_slot_lock_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    (locks / "slot-1.lock").symlink_to(victim)
    with pytest.raises(BackendError, match=r"slot-1.lock is a symbolic link"):
        allocate_block(locks)
    assert victim.read_text() == "precious\n"


def test_a_lock_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory another user owns needs root")
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    os.chown(locks, 4242, 4242)
    with pytest.raises(BackendError, match=rf"{locks} belongs to uid 4242, not to you .*remove it"):
        allocate_block(locks)
    assert list(locks.iterdir()) == []


def test_a_lock_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    locks.chmod(0o777)
    with pytest.raises(BackendError, match=rf"{locks} can be written by group or others \(mode 777\).*chmod 700"):
        allocate_block(locks)
    assert list(locks.iterdir()) == []


@pytest.mark.parametrize("what", ["file", "symlink"])
def test_a_lock_dir_that_is_not_a_directory_is_a_clear_error(tmp_path: Path, what: str) -> None:
    locks = tmp_path / "locks"
    if what == "file":
        locks.write_text("")
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        locks.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BackendError, match=rf"lock directory {locks} .*remove it"):
        allocate_block(locks)
    assert not list((tmp_path / "elsewhere").glob("*")) if what == "symlink" else locks.read_text() == ""


def test_a_fresh_lock_dir_is_private(tmp_path: Path) -> None:
    locks = tmp_path / "a" / "locks"
    block = allocate_block(locks)
    block.release()
    assert locks.stat().st_mode & 0o777 == 0o700
    assert (locks / "next-slot").stat().st_mode & 0o777 == 0o600
