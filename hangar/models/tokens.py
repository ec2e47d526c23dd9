"""Counting a text's tokens offline: OpenAI's ``o200k_base`` encoding through
``bpe-openai`` (the Rust ``bpe`` crate, its vocabularies compiled in: no network, where
tiktoken would download them). Other providers' tokenizers differ by some percent; what
counts tokens here (a rubric's ``max_tokens`` check, a first run's estimate) says so."""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import cast

from hangar.errors import ConfigError

TOKENIZER = "o200k_base (bpe-openai)"


@functools.cache
def _counter() -> Callable[[str], int]:
    """The Rust tokenizer itself (``bpe_openai._bindings``), loaded without the package's
    ``__init__``, which decodes every vocabulary it ships in Python first (3 s of a
    first run's estimate); the package's own encoding where the binding is not found."""
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or spec.origin is None:  # an install without the dependency
        raise ConfigError(
            "counting tokens needs the bpe-openai package: pip install 'bpe-openai>=0.1.4'"
        )
    binding = next(Path(spec.origin).parent.glob("_bindings*.so"), None)
    if binding is None:
        import bpe_openai  # type: ignore[import-untyped]

        encoding = bpe_openai.get_encoding("o200k_base")
        return lambda text: len(encoding.encode(text))
    name = "bpe_openai._bindings"
    loader = importlib.machinery.ExtensionFileLoader(name, str(binding))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))  # type: ignore[arg-type]
    loader.exec_module(module)
    return cast(Callable[[str], int], module.tokenizer_for_encoding("o200k_base").count)


def count_tokens(text: str) -> int:
    """Tokens of `text` in ``o200k_base``."""
    return _counter()(text)
