"""Text → AST: the Lark grammar, its error reporting, and the transformer building the nodes (dataclasses)."""
