"""One SSH session of an SSH-enabled Instance (sshd's ForceCommand in the `sshd` sidecar):
enter `main`'s namespaces as `main`'s user with `main`'s environment (the device-visibility
variables its grant carries among them), then run the client's command there, or a login shell.

`main` is the oldest process of the Pod outside this container's mount namespace: the Pod
shares one process namespace, and its PID 1 is the Pod's pause. The session becomes `nsenter`
(exec, so the client gets the command's own exit status and the session's stdin)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


class NoMain(RuntimeError):
    """`main` has no running process to enter."""


def main_process(proc: Path = Path("/proc")) -> int:
    """The lowest PID above 1 whose mount namespace is not this process's."""
    own = os.readlink(proc / "self" / "ns" / "mnt")
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) <= 1:
            continue
        try:
            namespace = os.readlink(entry / "ns" / "mnt")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if namespace != own:
            found.append(int(entry.name))
    if not found:
        raise NoMain("the main container is not running")
    return min(found)


def owner(status: str) -> tuple[int, int]:
    """The effective uid and gid a `/proc/<pid>/status` names."""
    ids: dict[str, int] = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Uid", "Gid"):
            ids[key] = int(rest.split()[1])
    return ids["Uid"], ids["Gid"]


def environment(raw: bytes) -> list[str]:
    """`/proc/<pid>/environ` as NAME=value entries (a malformed one dropped)."""
    return [item.decode(errors="surrogateescape") for item in raw.split(b"\0") if b"=" in item[1:]]


def session_argv(
    target: int, uid: int, gid: int, env: Sequence[str], session: Mapping[str, str]
) -> list[str]:
    """The `nsenter` command line of one session: all of `main`'s namespaces, its root and
    working directory, its user, only its environment (and the client's TERM)."""
    command = session.get("SSH_ORIGINAL_COMMAND", "")
    shell = ["/bin/sh", "-c", command] if command else ["/bin/sh", "-l"]
    term = f"TERM={session.get('TERM') or 'dumb'}"
    return [
        "nsenter",
        f"--target={target}",
        "--all",
        "--root",
        "--wd",
        f"--setuid={uid}",
        f"--setgid={gid}",
        "--",
        "env",
        "-i",
        term,
        *env,
        *shell,
    ]


def main() -> None:
    try:
        target = main_process()
        proc = Path("/proc") / str(target)
        uid, gid = owner((proc / "status").read_text())
        env = environment((proc / "environ").read_bytes())
    except (NoMain, OSError) as err:
        print(f"gpustack ssh: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    argv = session_argv(target, uid, gid, env, os.environ)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
