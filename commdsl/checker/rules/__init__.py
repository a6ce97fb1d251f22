"""Checker rules, one module per family. Each module yields diagnostics from a `Context` (their codes and
docs are the `Rule` classes of `commdsl/rules/`); the engine reports what happened, a rule decides what to say."""
