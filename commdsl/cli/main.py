"""`commdsl <verb> FILE… [options]`: argument parsing and dispatch; each verb is its own module."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from commdsl import __version__
from commdsl.cli.common import EXIT_FAILURE, UsageError

# modules under commdsl.cli, each with `add_parser(subparsers)` registering its verb(s) and a handler.
# They import torch only inside their handlers, so `check` and `lint` start without it.
VERB_MODULES = ("check", "sim", "run", "compile", "bench", "predict", "graph", "fmt", "explain")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="commdsl",
        allow_abbrev=False,
        description="Describe, check, run and measure the communication patterns of distributed PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"commdsl {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    for name in VERB_MODULES:
        importlib.import_module(f"commdsl.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
