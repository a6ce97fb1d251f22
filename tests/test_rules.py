"""The rule table: every `Rule` class well-formed and listed once in commdsl/rules/registry.py, and every code
the package raises listed there.

The docs each rule carries (sections, examples that behave) are tested in tests/test_explain.py.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import pkgutil
import re
import tokenize
from pathlib import Path

import pytest

import commdsl
import commdsl.collectives
import commdsl.rules
from commdsl.rules import FAMILIES, Rule
from commdsl.rules import docs as D
from commdsl.rules.registry import BY_NAME, CODES, RULES, lookup

PACKAGE = Path(commdsl.__file__).resolve().parent
SOURCES = sorted(PACKAGE.rglob("*.py"))
CODE_LITERAL = re.compile(r"[SNPCDRBLV]\d{3}")

# The codes each family module may hold (S0xx in syntax.py, N101-N112 in names.py, ...).
MODULE_CODES = {
    "syntax": r"S0\d\d", "names": r"N1[01]\d", "sizes": r"N1[2-9]\d", "p2p": r"P2\d\d", "collectives": r"C3\d\d",
    "deadlock": r"D4\d\d", "requests": r"R5\d\d", "backend": r"B6\d\d", "idioms": r"L7\d\d", "verify": r"V8\d\d",
    "suppression": r"L7\d\d", "settings": r"N137",
    "all_to_all": r"C3\d\d",  # a collective's own rule lives in its kind module
    "coalesced": r"C31[4-7]",  # the `coalesced:` block rules
}


def rule_classes() -> list[type[Rule]]:
    """Every Rule subclass defined in a module of commdsl/rules/ or commdsl/collectives/ (a kind's own rule),
    whether the registry lists it or not."""
    found = []
    modules = [f"commdsl.rules.{i.name}" for i in pkgutil.iter_modules(commdsl.rules.__path__)]
    modules += [f"commdsl.collectives.{i.name}" for i in pkgutil.iter_modules(commdsl.collectives.__path__)]
    for name in modules:
        module = importlib.import_module(name)
        found += [obj for obj in vars(module).values()
                  if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule
                  and obj.__module__ == module.__name__]
    return found


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_code_and_name_are_well_formed(rule):
    family = rule.__module__.rsplit(".", 1)[1]
    assert re.fullmatch(MODULE_CODES[family], rule.code), f"{rule.code} does not belong in rules/{family}.py"
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", rule.name), "names are kebab-case"
    assert not rule.name.startswith(("check-", "no-")), "a name names the bad thing"
    assert rule.__name__ == "".join(word.capitalize() for word in rule.name.split("-"))
    assert rule.severity in ("error", "warning")
    assert rule.severity == "warning" or rule.code[0] != "L", "idiom lints are warnings"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_docstring_is_a_summary_then_sections(rule):
    summary = rule.summary()
    assert not summary[0].isupper() and not summary.endswith("."), "message style: lowercase, no final period"
    assert inspect.cleandoc(rule.__doc__).split("\n")[1] == "", "a blank line after the summary"
    assert rule.docs().startswith("## What it does\n")


def test_every_rule_class_is_in_the_table_once():
    classes = rule_classes()
    assert len(classes) == len(set(classes))
    assert sorted(c.code for c in classes) == sorted(r.code for r in RULES)
    assert set(classes) == set(RULES) and len(RULES) == len(set(RULES))


def test_table_is_unique_and_in_family_order():
    order = [f.letter for f in FAMILIES]
    codes = [r.code for r in RULES]
    assert len(set(codes)) == len(codes) and len(BY_NAME) == len(RULES)
    assert codes == sorted(codes, key=lambda c: (order.index(c[0]), c))
    assert list(CODES) == codes


def test_lookup_takes_the_code_or_the_name():
    rule = CODES["P201"]
    assert lookup("p201") is lookup(" unmatched-send ") is lookup("Unmatched-Send") is rule
    assert lookup("P999") is None and lookup("unmatched-sned") is None


def test_diagnostic_fills_code_and_severity():
    lint = CODES["L701"].diagnostic("one rank sends the same buffer to every other", label="here")
    assert (lint.code, lint.severity, lint.name, lint.label) == ("L701", "warning", "send-loop-is-broadcast", "here")
    assert CODES["N101"].diagnostic("undefined name `x`").severity == "error"


def test_a_removed_rule_keeps_its_code_and_says_so():
    class RetiredRule(Rule):
        """a rule that was retired

        ## What it does

        Nothing any more.
        """

        code = "P299"
        name = "retired-rule"
        removed = True

    assert D.explanation(RetiredRule).startswith("# P299 `retired-rule`\n\n**removed (was error)** · a rule that was")


# ---- every code the package raises is in the table ---------------------------------------------

def code_literals(path: Path) -> set[str]:
    """Every string literal that is exactly a code (`code="P201"`, `_fail("N120", ...)`, a dict key), except a
    Rule class's own `code = "C312"`, which is where a code is defined."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return {tok.string[1:-1] for tok in tokens
            if tok.type == tokenize.STRING and CODE_LITERAL.fullmatch(tok.string[1:-1])
            and not re.fullmatch(r"\s*code = \"[A-Z]\d{3}\"\s*", tok.line)}


def rules_used(path: Path) -> list[tuple[int, type[Rule]]]:
    """Each use of a module-level name bound to a Rule class: `UnmatchedSend.diagnostic(...)`, or a rule handed on
    (`self.error(UndefinedName, ...)`), with its line."""
    module = importlib.import_module(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    rules = {name for name, obj in vars(module).items() if inspect.isclass(obj) and issubclass(obj, Rule)}
    return [(node.lineno, getattr(module, node.id)) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in rules]


def test_no_code_is_spelled_outside_its_rule():
    """Raise sites name the rule class (`UnmatchedSend.diagnostic(...)`): a code string elsewhere would be a
    second place that registers it."""
    spelled = {(path.relative_to(PACKAGE).as_posix(), code) for path in SOURCES if path.parent != PACKAGE / "rules"
               for code in code_literals(path)}
    assert sorted(spelled) == []


def test_every_rule_raised_in_the_package_is_registered():
    sites = [(path.relative_to(PACKAGE).as_posix(), line, rule) for path in SOURCES
             if ".diagnostic(" in path.read_text(encoding="utf-8") and path.parent != PACKAGE / "rules"
             for line, rule in rules_used(path)]
    assert {where for where, _, _ in sites} >= {"resolve.py", "syntax/parser.py", "syntax/transform.py", "limits.py",
                                                "expand.py", "values.py"}
    assert [(where, line, rule) for where, line, rule in sites if rule is not Rule and rule not in RULES] == []
