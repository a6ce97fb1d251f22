"""Checker rules, one module per family. Each module registers its codes and yields diagnostics from a
`Context`; the engine reports what happened, a rule decides what to say."""
