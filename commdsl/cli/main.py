"""`commdsl <verb> FILE… [options]`: argument parsing and dispatch; each verb is its own module."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys

from commdsl import __version__
from commdsl.cli.common import EXIT_FAILURE, UsageError

# each verb, in `commdsl --help` order, and the module under commdsl.cli whose `add_parser(subparsers)`
# registers it and its handler. The modules import torch only inside their handlers, so `check` and `lint`
# start without it; a command imports only its own verb's module (see `build_parser`).
VERBS = {
    "check": "check",
    "lint": "check",
    "sim": "sim",
    "run": "run",
    "compile": "compile",
    "bench": "bench",
    "predict": "predict",
    "graph": "graph",
    "timeline": "graph",
    "fmt": "fmt",
    "explain": "explain",
    "lsp": "lsp",
    "trace": "trace",
}


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a misspelt verb or choice (Python 3.14 has it built in); `verbs`
    holds each verb's own parser."""

    verbs: dict[str, Parser]

    def error(self, message: str):
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean '{close[0]}'?"
        super().error(message)


def _unrecognised(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """argparse's message for arguments a verb does not take, with the option each one probably meant."""
    options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for arg in extra:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.6)
            if close:
                hints.append(f"{arg.split('=', 1)[0]}: did you mean {close[0]}?")
    return f"unrecognized arguments: {' '.join(extra)}" + "".join(f"\n  {h}" for h in hints)


def build_parser(verb: str | None = None) -> Parser:
    """The parser of every verb, or with `verb` only of the verbs its module registers: a command then
    starts without importing the others' modules (`lint` without predict's cost model or bench's plan),
    which is most of a small program's lint. `--help`, no verb and a misspelt one get every verb."""
    parser = Parser(
        prog="commdsl",
        allow_abbrev=False,
        description="Describe, check, run and measure the communication patterns of distributed PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"commdsl {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    for name in [VERBS[verb]] if verb in VERBS else dict.fromkeys(VERBS.values()):
        importlib.import_module(f"commdsl.cli.{name}").add_parser(sub)
    parser.verbs = sub.choices
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    script_args: list[str] = []
    if argv[:1] == ["trace"] and "--" in argv:  # `commdsl trace SCRIPT [options] -- SCRIPT'S OWN ARGS`
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args, extra = parser.parse_known_args(argv)
    if extra:
        verb = parser.verbs[args.verb]
        verb.error(_unrecognised(verb, extra))
    if script_args:
        args.script_args = script_args
    try:
        return args.handler(args)
    except UsageError as e:
        parser.exit(EXIT_FAILURE, f"commdsl {args.verb}: error: {e}\n")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as e:  # a bug in commdsl, not in the user's program: one line, the trace on request
        if os.environ.get("COMMDSL_DEBUG"):
            raise
        sys.stderr.write(
            f"commdsl {args.verb}: internal error: {type(e).__name__}: {e}\n"
            "this is a bug in commdsl; rerun with COMMDSL_DEBUG=1 for the traceback and report it\n"
        )
        return EXIT_FAILURE


def entry() -> None:
    sys.exit(main())
