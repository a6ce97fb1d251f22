"""`commdsl lsp`: milliseconds from a keystroke (a didChange notification) to the diagnostics of the new text,
on a shipped program, as an editor sees them. Each round changes one character (a comment, so the findings
stay the same) and waits for the publication of that version; the server's debounce (`lsp.DEBOUNCE_S`)
is part of the figure, as it is of what a user waits.

    python benchmarks/lsp_latency.py programs/pipeline_1f1b.comm --rounds 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lsp_client import Client  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("program", type=Path)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    text = args.program.read_text()
    client = Client(ROOT)
    client.request("initialize", {"processId": None, "rootUri": ROOT.as_uri(), "capabilities": {}})
    client.notify("initialized", {})
    uri = args.program.resolve().as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "commdsl", "version": 1,
                                                            "text": text}})
    client.diagnostics(uri, version=1)
    times = []
    for version in range(2, args.rounds + 2):
        changed = text + f"# keystroke {version}\n"
        sent = time.perf_counter()
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [{"text": changed}]})
        client.diagnostics(uri, version=version)
        times.append((time.perf_counter() - sent) * 1e3)
    client.close()
    print(f"{args.program}: {args.rounds} keystrokes, diagnostics after median {statistics.median(times):.0f} ms, "
          f"p90 {sorted(times)[int(0.9 * len(times)) - 1]:.0f} ms, max {max(times):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
