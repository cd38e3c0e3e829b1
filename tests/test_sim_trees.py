"""Who owns a simulated tree: only a tree no live host holds is removed as stale, whatever
PID namespace its host ran in (a host is PID 1 of its container)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from devicehost.simulation.trees import (
    SIM_LOCK_FILE,
    SIM_OWNER_FILE,
    SIM_PREFIX,
    make_sim_root,
    remove_sim_root,
)


def planted(directory: Path, name: str, owner_pid: str) -> Path:
    """A tree as another host left it: its owner's pid, and its lock file."""
    tree = directory / f"{SIM_PREFIX}{name}"
    tree.mkdir()
    (tree / SIM_LOCK_FILE).touch()
    (tree / SIM_OWNER_FILE).write_text(owner_pid)
    return tree


def test_a_tree_whose_owner_holds_its_lock_stays_whatever_its_pid_looks_like(tmp_path):
    """A host in another PID namespace wrote a pid that means nothing here (no such
    process): while it holds the tree's lock, a new host leaves the tree alone."""
    tree = planted(tmp_path, "other-namespace", "999999")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\n"
         "time.sleep(600)\n", str(tree / SIM_LOCK_FILE)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        mine = make_sim_root(tmp_path)
        assert tree.is_dir()
        remove_sim_root(mine)
    finally:
        holder.kill()
        holder.wait()


def test_a_pid_1_host_s_tree_is_removed_once_its_lock_is_free(tmp_path):
    """A tree left by a host that was PID 1 of its container (pid 1 always looks alive
    here) is removed by the next host once nobody holds its lock."""
    tree = planted(tmp_path, "pid1-host", "1")
    mine = make_sim_root(tmp_path)
    assert not tree.exists()
    remove_sim_root(mine)


def test_a_tree_is_locked_while_its_host_lives_and_free_once_removed(tmp_path):
    """The host holds its own tree's lock (a second look finds it taken) until it removes
    the tree."""
    mine = make_sim_root(tmp_path)
    fd = os.open(mine / SIM_LOCK_FILE, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            taken = False
        except BlockingIOError:
            taken = True
        assert taken
    finally:
        os.close(fd)
    second = make_sim_root(tmp_path)
    assert second != mine and mine.is_dir()
    remove_sim_root(mine)
    remove_sim_root(second)
    assert not mine.exists() and not second.exists()
