"""The settings file (`[tool.commdsl]`, `commdsl.toml`): its mistakes point into that file."""

from __future__ import annotations

from commdsl.rules import Rule


class InvalidSettings(Rule):
    """a settings file that is not TOML, or has a key or value commdsl does not take

    ## What it does

    Reports a `commdsl.toml`, or the `[tool.commdsl]` table of a `pyproject.toml`, that does not parse
    as TOML, has a key that is not a setting (with the closest one), or a value of the wrong type or
    range, at the key in the file. `check`, `lint` and `fmt` stop with exit code 2.

    ## Why is this bad?

    A misspelt key (`selct`) would otherwise be ignored in silence: the project would believe a rule is
    selected, or a world size checked, that is not.

    ## Example

    ```console
    $ printf '[tool.commdsl]\\nselct = ["D"]\\n' > pyproject.toml
    $ commdsl lint programs/p2p.comm
    ```

    ## Use instead

    ```comm
    # pyproject.toml:
    #   [tool.commdsl]
    #   select = ["D"]
    program settings
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    expect x == 1
    ```
    """

    code = "N137"
    name = "invalid-settings"
    example_too_large = True
