"""Text → AST: the Lark grammar, its error reporting, and the transformer building pydantic nodes."""
