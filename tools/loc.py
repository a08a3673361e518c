"""Count code lines in frost/: lines holding a code token (comments, docstrings, blanks are free).

python tools/loc.py          # per-file counts and the total (budget: 5000, see DESIGN.md)
"""

import io
import pathlib
import sys
import tokenize

BUDGET = 5000  # DESIGN.md
SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    lines = set()
    prev = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        # A string standing alone as a statement is a docstring: free.
        docstring = tok.type == tokenize.STRING and prev in (
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.NL,
        )
        if tok.type not in SKIP and not docstring:
            lines.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type if not docstring else tokenize.NEWLINE
    return len(lines)


def main(root="frost"):
    total = 0
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        n = code_lines(path.read_text())
        total += n
        print(f"{n:6d}  {path}")
    print(f"{total:6d}  total (budget {BUDGET})")
    return 0 if total <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
