"""The user's files: read with a bound, regular files only; written atomically, never over an input.

Reading: `/dev/zero` would grow without end, a FIFO would block `open()` forever, and a huge file
would be parsed before anything noticed. So a file is opened without blocking, must be a regular
file, and is read up to a limit (the limit names itself in the error).

Writing: `fmt` used to truncate the program and write it again, so a kill or a full disk in between
lost it; `compile -o`, `graph -o`, `--report`, `--trace` and `bench --json` would overwrite any path,
the input `.comm` included. Every write now goes to a temporary file in the target's directory, is
flushed to disk, and is renamed over the target in one step: the target holds either the old bytes or
the new ones. A target that is one of the command's inputs (the same file, through any link) is refused.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable

MAX_PROGRAM_BYTES = 1 << 20
"""The largest `.comm` file commdsl reads (1 MiB; the shipped programs are a few KiB)."""
MAX_TRACE_BYTES = 1 << 30
"""The largest trace `commdsl timeline` reads."""


class FileError(Exception):
    """A file could not be read or written; the message names the path and why (exit 2)."""


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"


def read_bytes(path: str | os.PathLike, limit: int = MAX_PROGRAM_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; FileError otherwise (never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise FileError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a directory"
                if stat.S_ISDIR(info.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket"
                if stat.S_ISSOCK(info.st_mode)
                else "not a plain file"
            )
            raise FileError(f"cannot read {os.fspath(path)}: it is {kind}, not a regular file")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= limit:  # st_size can lie (/proc files say 0): count what arrives
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            more = max(info.st_size, total)
            raise FileError(
                f"cannot read {os.fspath(path)}: it is {'over ' if more == total else ''}{_size(more)}, "
                f"more than the {_size(limit)} commdsl reads"
            )
        return b"".join(chunks)
    except OSError as e:
        raise FileError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def check_not_input(target: str | os.PathLike, inputs: Iterable[str | os.PathLike], flag: str = "") -> None:
    """FileError when `target` is (a link to) one of `inputs`: an output never replaces what was read."""
    target = os.fspath(target)
    for source in inputs:
        try:
            same = os.path.samefile(target, source)
        except OSError:  # one of them does not exist (yet): not the same file
            same = False
        if same:
            where = f"{flag} {target}" if flag else target
            raise FileError(
                f"{where}: this is the input {os.fspath(source)}; refusing to overwrite it (name another file)"
            )


def check_output(target: str | os.PathLike, inputs: Iterable[str | os.PathLike], flag: str = "") -> None:
    """FileError, before any work, when `target` cannot become the output file: it is one of `inputs` (through
    any link), a directory, or in a directory that does not exist (a run or a benchmark once finished only
    to find it could not write its report)."""
    check_not_input(target, inputs, flag)
    path = os.fspath(target)
    where = f"{flag} {path}" if flag else path
    if os.path.isdir(path):
        raise FileError(f"{where}: this is a directory; name a file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise FileError(f"{where}: the directory does not exist")


def _default_mode() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(
    path: str | os.PathLike, data: bytes | str, *, inputs: Iterable[str | os.PathLike] = (), flag: str = ""
) -> None:
    """Replace `path` with `data` in one step: a temporary file in the same directory, flushed, then renamed.

    A symbolic link is followed (the file it names is replaced, the link stays). An existing file keeps
    its permission bits; a new one gets the usual 0666 minus the umask. Something that is not a regular
    file (`/dev/null`, `/dev/stdout`, a FIFO) is written to as it is: renaming over it would replace a
    device with a file. Raises FileError, leaving `path` as it was, when `path` is one of `inputs` or
    anything fails."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    check_not_input(path, inputs, flag)
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        special = False
    if special:
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise FileError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
        return
    target = os.path.realpath(os.fspath(path))
    directory, name = os.path.split(target)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = _default_mode()
    except OSError as e:
        raise FileError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory or ".", prefix=f".{name}.", suffix=".tmp")
    except OSError as e:
        raise FileError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise FileError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
        raise
    try:  # the rename itself reaches the disk with the directory
        dfd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
