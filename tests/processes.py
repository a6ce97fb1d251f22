"""What the tests that start processes share: finding what they left behind."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

TOKEN_VAR = "COMMDSL_TEST_TOKEN"
"""Set in the environment of every process a test starts, so a survivor can be found by it."""


def children(pid: int | None = None) -> list[int]:
    """Live (not zombie) children of `pid`, default this process."""
    pid = os.getpid() if pid is None else pid
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


def carrying(token: str) -> list[int]:
    """Processes other than this one whose environment holds the test's token."""
    needle = f"{TOKEN_VAR}={token}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle in Path(f"/proc/{entry}/environ").read_bytes():
                    out.append(int(entry))
            except OSError:
                continue
    return out


def running(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return False


def orphan_guard():
    """Generator for the `no_orphans` fixture: yields a token; afterwards nothing started may run."""
    token = uuid.uuid4().hex
    before = set(children())
    yield token
    left = [p for p in set(carrying(token)) | (set(children()) - before) if running(p)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def listening(pids) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket in LISTEN state that one of `pids` holds, as the kernel
    reports them (/proc/net/tcp and tcp6; `ss -ltnp` reads the same tables)."""
    import ipaddress

    inodes: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            # the kernel prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            inodes[fields[9]] = (str(ipaddress.ip_address(raw)), int(hex_port, 16))
    out = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                out.add((pid, *inodes[target[8:-1]]))
    return out


def failed_in_set_up(report: dict) -> bool:
    """A `--report` of a run that torch's set-up failed, which says nothing about the program's ops: the hang
    guard stopped it while every rank was still setting up (store, process group, groups: a loaded machine
    is slow to form a group, or set-up itself hung, and the report names the torch call each rank was in),
    or a rank lost a peer while still connecting because a faster rank had ended (Gloo fails a plain torch
    script so too, a few launches in a hundred on a loaded machine when ranks have nothing to do)."""
    hang = report.get("hang") or []
    if hang:
        return all(h.get("state") == "setting up" for h in hang)
    culprit = next((f for f in report.get("failures") or [] if f.get("culprit")), None)
    return (
        culprit is not None and culprit["kind"] == "peer" and culprit["line"] is None
        and "still connecting" in culprit["cause"]
    )
