"""`commdsl lsp`: the language server, over stdin and stdout, for editors (editors/vscode starts it)."""

from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser(
        "lsp",
        help="language server for editors: diagnostics while typing, explain on hover, formatting",
        description="Speak the Language Server Protocol over stdin/stdout: check .comm documents as they are "
        "opened, changed and saved (as `commdsl lint`, with the project's settings), explain a code on hover, "
        "format on request. Editors start it; see editors/vscode.",
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    from commdsl.lsp import serve

    serve()
    return 0
