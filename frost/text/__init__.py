"""frost.text: byte-level BPE tokenizers (train, encode, decode, save, export to HF tokenizers).

BPE as Sennrich et al. (2016) learn it, on the 256 bytes as GPT-2 does (Radford et al., 2019).

```python
from frost.text import kjv_text, train

tok = train(kjv_text(), vocab_size=4096)
tok.decode(tok.encode("Let there be light")) == "Let there be light"
```

Names load on first use, so `frost tokenizer --help` (and every `frost` command) does not pay
for numpy and regex.
"""

import importlib

_HOMES = {
    "bpe": [
        "GPT4_PATTERN",
        "Tokenizer",
        "count_chunks",
        "split_chunks",
        "stream_files",
        "train",
        "train_counts",
    ],
    "corpus": ["kjv_path", "kjv_text"],
    "io": ["load", "save", "save_hf", "to_hf_json", "token_dtype"],
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name):
    if name in _HOMES:  # a submodule: frost.text.io
        return importlib.import_module(f"frost.text.{name}")
    if name in _HOME:
        return getattr(importlib.import_module(f"frost.text.{_HOME[name]}"), name)
    raise AttributeError(f"module 'frost.text' has no attribute {name!r}")
