"""Issue 14: files are read with a bound (regular files only) and written atomically, never over an input."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pytest

from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.files import MAX_PROGRAM_BYTES, FileError, read_bytes, write_atomic
from commdsl.resolve import load
from commdsl.source import SourceFile
from commdsl.syntax.parser import MAX_LINES

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = "world 2\ntensor x: float32[3] = rank + 1\nall_reduce x\nexpect x == 3\n"


def cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main([*argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


# ---- reading ---------------------------------------------------------------------------------------------------

def test_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "p.comm"
    os.mkfifo(fifo)
    started = time.monotonic()
    rc, _, err = cli(capsys, "check", str(fifo))
    assert rc == 2 and "it is a FIFO, not a regular file" in err
    assert time.monotonic() - started < 10  # opening a FIFO for reading used to wait for a writer forever


@pytest.mark.parametrize(("verb", "path", "kind"), [("check", "/dev/zero", "a device"), ("check", "/dev/null", "a device"),
                                                     ("sim", ".", "a directory")])
def test_devices_and_directories_are_refused(verb, path, kind, capsys):
    """(`check`, `lint` and `fmt` search a directory for .comm files: tests/test_lint_settings.py.)"""
    rc, _, err = cli(capsys, verb, path, *(["--world", "2"] if verb == "sim" else []))
    assert rc == 2 and f"it is {kind}, not a regular file" in err


def test_a_file_over_the_limit_is_refused_naming_the_limit(tmp_path, capsys):
    big = tmp_path / "big.comm"
    big.write_bytes(b"\n" * (3 * MAX_PROGRAM_BYTES))
    for verb in (["check"], ["fmt"], ["sim", "--world", "2"]):
        rc, _, err = cli(capsys, verb[0], str(big), *verb[1:])
        assert rc == 2 and "it is 3 MiB, more than the 1 MiB commdsl reads" in err


def test_a_file_whose_size_lies_is_read_up_to_the_limit():
    assert len(read_bytes("/proc/self/status")) > 0  # st_size is 0 for /proc files
    with pytest.raises(FileError, match="more than the 16 bytes"):
        read_bytes("/proc/self/status", limit=16)


def test_too_many_lines_is_s008_before_parsing():
    text = "world 2\n" + "\n" * MAX_LINES + "barrier\n"
    with pytest.raises(CommdslError) as e:
        load(SourceFile("t.comm", text))
    [d] = e.value.diagnostics
    assert d.code == "S008" and d.span.line == MAX_LINES + 1 and str(MAX_LINES) in d.message


# ---- writing ---------------------------------------------------------------------------------------------------

def test_write_atomic_replaces_the_file_in_one_step(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(0o640)
    with open(target) as reader:  # a reader of the old file keeps the old bytes: a rename, not a truncation
        write_atomic(target, "new")
        assert reader.read() == "old"
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_write_atomic_writes_into_what_is_not_a_regular_file(tmp_path):
    """`--json /dev/stdout`, `-o /dev/null`, a FIFO: written to, never renamed over (as root, a rename over
    /dev/null replaced the device with a file; /dev/stdout, a link into /proc, could not be written at all)."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, "rows")
    reader.join(timeout=10)
    assert got == [b"rows"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_write_atomic_follows_a_symlink(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, failing):
    target = tmp_path / "prog.comm"
    target.write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, failing, full)
    with pytest.raises(FileError, match="No space left on device"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.comm"]


def test_fmt_on_a_full_disk_keeps_the_program(tmp_path, monkeypatch, capsys):
    prog = tmp_path / "p.comm"
    prog.write_text("world 2\ntensor x:float32[3]\nall_reduce   x\n")
    before = prog.read_bytes()
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    rc, _, err = cli(capsys, "fmt", str(prog))
    assert rc == 2 and "No space left on device" in err
    assert prog.read_bytes() == before


@pytest.fixture
def prog(tmp_path) -> Path:
    path = tmp_path / "p.comm"
    path.write_text(PROGRAM)
    return path


@pytest.mark.parametrize("argv", [
    ["compile", "{p}", "--world", "2", "-o", "{out}"],
    ["graph", "{p}", "--world", "2", "--format", "dot", "-o", "{out}"],
    ["run", "{p}", "--nproc", "2", "--report", "{out}"],
    ["run", "{p}", "--nproc", "2", "--trace", "{out}"],
    ["bench", "{p}", "--nproc", "2", "--json", "{out}"],
    ["bench", "{p}", "--nproc", "2", "--csv", "{out}"],
])
@pytest.mark.parametrize("how", ["same", "hardlink", "symlink"])
def test_no_output_overwrites_the_input(argv, how, prog, tmp_path, capsys):
    out = prog
    if how == "hardlink":
        out = tmp_path / "alias.comm"
        os.link(prog, out)
    elif how == "symlink":
        out = tmp_path / "alias.comm"
        out.symlink_to(prog)
    rc, _, err = cli(capsys, *[a.format(p=prog, out=out) for a in argv])
    assert rc == 2 and "refusing to overwrite it" in err
    assert prog.read_text() == PROGRAM


OUTPUTS = [
    ["compile", "{p}", "--world", "2", "-o", "{out}"],
    ["graph", "{p}", "--world", "2", "--format", "dot", "-o", "{out}"],
    ["run", "{p}", "--nproc", "2", "--report", "{out}"],
    ["run", "{p}", "--nproc", "2", "--trace", "{out}"],
    ["bench", "{p}", "--nproc", "2", "--json", "{out}"],
    ["bench", "--collective", "all_reduce", "--nproc", "2", "--plot", "{out}"],
    ["timeline", "{p}", "--png", "{out}"],
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", OUTPUTS)
@pytest.mark.parametrize(("where", "says"), [("dir", "this is a directory; name a file"),
                                             ("missing/out.png", "the directory does not exist")])
def test_an_output_that_cannot_be_a_file_is_refused_before_the_work(argv, where, says, prog, tmp_path, capsys):
    """A run or a benchmark once went all the way through, then could not write its report over a directory."""
    (tmp_path / "dir").mkdir()
    out = tmp_path / where
    rc, _, err = cli(capsys, *[a.format(p=prog, out=out) for a in argv])
    assert rc == 2 and f"{out}: {says}" in err and "internal error" not in err


def test_timeline_does_not_overwrite_its_trace(tmp_path, capsys):
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    rc, _, err = cli(capsys, "timeline", str(trace), "--png", str(trace))
    assert rc == 2 and "refusing to overwrite it" in err and trace.read_text() == '{"traceEvents": []}'


def test_compile_output_is_written_atomically_with_the_usual_mode(prog, tmp_path, capsys):
    out = tmp_path / "ring.py"
    assert cli(capsys, "compile", str(prog), "--world", "2", "-o", str(out))[0] == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.comm", "ring.py"]


# ---- fmt keeps what formatting does not own ---------------------------------------------------------------------

UGLY = "world 2\ntensor x:float32[3]  #\tthe\tdata\n#\tnotes\tin\tcolumns\nall_reduce   x\n"
PRETTY = "world 2\ntensor x: float32[3]  #\tthe\tdata\n#\tnotes\tin\tcolumns\nall_reduce x\n"


@pytest.mark.parametrize(("bom", "newline"), [(b"", "\n"), (b"\xef\xbb\xbf", "\n"), (b"", "\r\n"),
                                              (b"\xef\xbb\xbf", "\r\n")])
def test_fmt_keeps_bom_line_endings_and_tabs_in_comments(bom, newline, tmp_path, capsys):
    path = tmp_path / "p.comm"
    path.write_bytes(bom + UGLY.replace("\n", newline).encode())
    path.chmod(0o604)
    rc, _, err = cli(capsys, "fmt", str(path))
    assert rc == 0, err
    assert path.read_bytes() == bom + PRETTY.replace("\n", newline).encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o604
    assert cli(capsys, "fmt", "--check", str(path))[0] == 0  # and the result is a fixed point
    assert cli(capsys, "check", str(path))[0] == 0
