"""`commdsl lsp`, spoken to as an editor would: a real client over the server's stdin and stdout."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from commdsl.lsp import position
from commdsl.source import SourceFile
from lsp_client import Client
from processes import TOKEN_VAR

DEADLOCK = "world 2\ntensor x: float32[4] = rank\nrecv x from 1 - rank\nsend x to 1 - rank\n"
FIXED = ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\non rank == 0:\n    send x to 1\n    recv y from 1\n"
         "else:\n    recv y from 0\n    send x to 0\n")


@pytest.fixture
def client(tmp_path, no_orphans):
    c = Client(tmp_path, {TOKEN_VAR: no_orphans})
    result = c.request("initialize", {"processId": os.getpid(), "rootUri": tmp_path.as_uri(), "capabilities": {}})
    caps = result["capabilities"]
    assert caps["hoverProvider"] and caps["documentFormattingProvider"]
    c.notify("initialized", {})
    yield c
    assert c.close() == 0


def open_doc(client: Client, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "commdsl", "version": 1,
                                                            "text": text}})
    return uri


@pytest.mark.timeout(90)
def test_diagnostics_while_typing(client, tmp_path):
    uri = open_doc(client, tmp_path / "d.comm", DEADLOCK)
    [d] = client.diagnostics(uri)
    assert d["code"] == "D401" and d["severity"] == 1 and d["source"] == "commdsl"
    assert d["range"]["start"] == {"line": 2, "character": 0} and d["codeDescription"]["href"].endswith("#d401")
    assert "deadlock" in d["message"] and "cycle: rank 0 at line 3" in d["message"]
    sent = time.monotonic()
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": FIXED}]})
    assert client.diagnostics(uri, version=2) == []
    assert time.monotonic() - sent < 5  # the figure for docs/benchmarks.md comes from benchmarks/lsp_latency.py
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                             "contentChanges": [{"text": "world 2\nsend x to 1\n"}]})
    [d] = client.diagnostics(uri, version=3)
    assert d["code"] == "N101" and d["range"]["start"] == {"line": 1, "character": 5}


@pytest.mark.timeout(90)
def test_the_other_party_is_related_information(client, tmp_path):
    text = (Path(__file__).resolve().parent.parent / "programs" / "bad" / "head_to_head_send.comm").read_text()
    uri = open_doc(client, tmp_path / "h.comm", text)
    [d] = client.diagnostics(uri)
    assert d["code"] == "D402" and d["range"]["start"]["line"] == 7
    assert [r["location"]["range"]["start"]["line"] for r in d["relatedInformation"]] == [10]
    assert d["relatedInformation"][0]["location"]["uri"] == uri


@pytest.mark.timeout(90)
def test_project_settings_apply(client, tmp_path):
    (tmp_path / "commdsl.toml").write_text('ignore = ["D"]\n')
    uri = open_doc(client, tmp_path / "d.comm", DEADLOCK)
    assert client.diagnostics(uri) == []


@pytest.mark.timeout(90)
def test_hover_explains_a_code_and_a_finding(client, tmp_path):
    uri = open_doc(client, tmp_path / "d.comm", DEADLOCK.replace("rank\nsend", "rank    # commdsl: noqa: P201\nsend"))
    client.diagnostics(uri)
    on_code = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": 2, "character": 42}})
    assert on_code["contents"]["kind"] == "markdown" and "**P201 unmatched-send**" in on_code["contents"]["value"]
    on_finding = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                       "position": {"line": 2, "character": 3}})
    assert "**D401 deadlock**" in on_finding["contents"]["value"]
    assert client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                 "position": {"line": 0, "character": 1}}) is None


@pytest.mark.timeout(90)
def test_formatting_is_commdsl_fmt(client, tmp_path):
    messy = "world   2\ntensor x : float32[4]=rank\nall_reduce   x\n"
    uri = open_doc(client, tmp_path / "m.comm", messy)
    [edit] = client.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                        "options": {"tabSize": 4, "insertSpaces": True}})
    assert edit["newText"] == "world 2\ntensor x: float32[4] = rank\nall_reduce x\n"
    bad = open_doc(client, tmp_path / "b.comm", "world 2\nsend x to\n")
    assert client.request("textDocument/formatting", {"textDocument": {"uri": bad}, "options": {
        "tabSize": 4, "insertSpaces": True}}) is None


def test_positions_count_tabs_as_one_character_and_astral_ones_as_two():
    source = SourceFile("t.comm", "\tx\n# \U0001f600 y\n")
    assert (position(source, 1, 9).line, position(source, 1, 9).character) == (0, 1)  # column 9: after the tab
    assert position(source, 2, 5).character == 5  # `# `, the emoji (two UTF-16 units), ` `: then `y`


def test_the_vscode_extension_starts_the_server():
    import json
    import re

    root = Path(__file__).resolve().parent.parent / "editors" / "vscode"
    package = json.loads((root / "package.json").read_text())
    assert package["main"] == "./extension.js" and "onLanguage:commdsl" in package["activationEvents"]
    assert "vscode-languageclient" in package["dependencies"]
    setting = package["contributes"]["configuration"]["properties"]["commdsl.server.command"]
    assert setting["default"] == ["commdsl", "lsp"]
    source = (root / "extension.js").read_text()
    assert re.search(r'get\("server\.command", \["commdsl", "lsp"\]\)', source) and "TransportKind.stdio" in source
