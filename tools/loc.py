"""Count the lines a reader reads in frost/: lines holding a code token of the source as
`ruff format` writes it (--line-length 100, from pyproject.toml), so folding code onto fewer lines
lowers nothing, plus one for every extra target of a packed assignment (`a, b = x, y` counts two)
and one for every statement after a `;`. Comments, docstrings and blank lines are free.

    python tools/loc.py          # per-file counts and the total (budget: 10400, see docs/design.md)
"""

import ast
import io
import pathlib
import subprocess
import sys
import tokenize

BUDGET = 10400  # docs/design.md: Optax's 9,400, raised for MinAtar, LM runs, hardening, RL eval
SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def formatted(path: pathlib.Path) -> str:
    """The file as `ruff format` would write it (the file itself is left as it is)."""
    out = subprocess.run(
        ["ruff", "format", "--stdin-filename", str(path), "-"],
        input=path.read_text(),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def code_lines(source: str) -> int:
    lines = set()
    prev = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        # A string standing alone as a statement is a docstring: free.
        statement_start = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL)
        docstring = tok.type == tokenize.STRING and prev in statement_start
        if tok.type not in SKIP and not docstring:
            lines.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type if not docstring else tokenize.NEWLINE
    return len(lines) + packed_lines(source)


def packed_lines(source: str) -> int:
    """Lines that packing saved: `a, b, c = x, y, z` reads as three assignments, so it adds two, and
    `x = 1; y = 2` adds one for the statement after the `;`."""
    extra = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List):
            packed = [t for t in node.targets if isinstance(t, ast.Tuple | ast.List)]
            extra += sum(len(t.elts) - 1 for t in packed)
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                pairs = zip(statements, statements[1:])
                extra += sum(a.end_lineno == b.lineno for a, b in pairs)
    return extra


def main(root="frost"):
    total = 0
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        n = code_lines(formatted(path))
        total += n
        print(f"{n:6d}  {path}")
    print(f"{total:6d}  total (budget {BUDGET})")
    return 0 if total <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
