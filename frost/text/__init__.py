"""frost.text: byte-level BPE tokenizers (train, encode, decode, save, export to HF tokenizers).

    from frost.text import train, kjv_text
    tok = train(kjv_text(), vocab_size=4096)
    tok.decode(tok.encode("Let there be light")) == "Let there be light"
"""
from .bpe import (GPT4_PATTERN, Tokenizer, count_chunks, split_chunks, stream_files, train,
                  train_counts)
from .corpus import kjv_path, kjv_text
from .io import load, save, save_hf, to_hf_json, token_dtype

__all__ = ["GPT4_PATTERN", "Tokenizer", "count_chunks", "kjv_path", "kjv_text", "load", "save", "save_hf",
           "split_chunks", "stream_files", "to_hf_json", "token_dtype", "train", "train_counts"]
