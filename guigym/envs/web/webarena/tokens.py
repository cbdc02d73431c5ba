"""``nltk.word_tokenize`` without the ``punkt`` data download.

WebArena's evaluators call ``nltk.word_tokenize``, which is Punkt sentence splitting with the
pre-trained English model (the ``punkt``/``punkt_tab`` data package, fetched at run time by
``nltk.download``, which this project cannot do) followed by ``NLTKWordTokenizer`` on each
sentence (regular expressions only, no data).

Here the second step is the same nltk class, and the first is nltk's own
``PunktSentenceTokenizer`` *without* trained parameters: the same algorithm (Kiss & Strunk 2006,
"Unsupervised Multilingual Sentence Boundary Detection", Computational Linguistics 32(4)) with an
empty abbreviation list, no collocations and no orthographic statistics. The two agree except
after abbreviations the English model learned (``"Dr. Smith"``: the trained model keeps
``Dr.`` in the sentence and yields the token ``Dr.``; ours ends a sentence there and yields
``Dr`` ``.``). The evaluators only ask whether one reference token is among an answer's tokens,
so a difference needs a reference equal to such an abbreviation without its period.
tests/test_webarena_evaluators.py pins the tokens on the cases that matter (numbers, currency,
slashes, sentence-final periods).
"""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _tokenizers():
    # imported lazily: importing nltk takes ~1 s and only tokenised checks need it
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by untrained Punkt."""
    return _tokenizers()[0].tokenize(text)


def word_tokenize(text: str) -> list[str]:
    """Tokens of ``text`` as ``nltk.word_tokenize(text)`` gives them, up to trained abbreviations."""
    sents, words = _tokenizers()
    return [tok for sent in sents.tokenize(text) for tok in words.tokenize(sent)]
