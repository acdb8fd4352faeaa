"""The SSH session's choices: which process is `main`, as whom and with what it runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecars.ssh_session import NoMain, environment, main_process, owner, session_argv


def _process(proc: Path, pid: str, mount_namespace: str) -> None:
    (proc / pid / "ns").mkdir(parents=True)
    os.symlink(mount_namespace, proc / pid / "ns" / "mnt")


def _pod(tmp_path: Path, processes: dict[str, str]) -> Path:
    """A /proc of one Pod: `self` in the sidecar's mount namespace."""
    proc = tmp_path / "proc"
    proc.mkdir()
    for pid, namespace in processes.items():
        _process(proc, pid, namespace)
    os.symlink("40", proc / "self")
    return proc


def test_main_is_the_oldest_process_outside_the_sidecar(tmp_path: Path) -> None:
    proc = _pod(
        tmp_path,
        {
            "1": "mnt:[100]",  # the pause container
            "12": "mnt:[200]",  # main's shell
            "30": "mnt:[200]",  # main's child
            "7": "mnt:[300]",  # sshd (the sidecar), older than main
            "40": "mnt:[300]",  # this session
        },
    )
    (proc / "sys").mkdir()  # not a process
    assert main_process(proc) == 12


def test_no_main_process_is_said(tmp_path: Path) -> None:
    proc = _pod(tmp_path, {"1": "mnt:[100]", "7": "mnt:[300]", "40": "mnt:[300]"})
    with pytest.raises(NoMain, match="main container is not running"):
        main_process(proc)


def test_the_effective_ids_of_main() -> None:
    status = "Name:\tsh\nUid:\t1000\t65532\t65532\t65532\nGid:\t1000\t65533\t65533\t65533\n"
    assert owner(status) == (65532, 65533)


def test_the_environment_keeps_values_whole() -> None:
    raw = b"PATH=/bin\0NVIDIA_VISIBLE_DEVICES=GPU-a1\0KEY=a=b c\0=odd\0\0"
    assert environment(raw) == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-a1", "KEY=a=b c"]


def test_a_command_runs_in_main_as_main_with_only_its_environment() -> None:
    argv = session_argv(
        12, 65532, 65532, ["PATH=/bin", "A=1"], {"SSH_ORIGINAL_COMMAND": "nvidia-smi -L"}
    )
    assert argv == [
        "nsenter",
        "--target=12",
        "--all",
        "--root",
        "--wd",
        "--setuid=65532",
        "--setgid=65532",
        "--",
        "env",
        "-i",
        "TERM=dumb",
        "PATH=/bin",
        "A=1",
        "/bin/sh",
        "-c",
        "nvidia-smi -L",
    ]


def test_without_a_command_a_login_shell_with_the_clients_terminal() -> None:
    argv = session_argv(12, 0, 0, [], {"TERM": "xterm-256color"})
    assert argv[-3:] == ["TERM=xterm-256color", "/bin/sh", "-l"]
