"""Token-fingerprint similarity of learners' code, by ``copydetect`` (winnowing, as MOSS does): the engine.

Contract:
- ``compare(documents, boilerplate=..., params=...)`` fingerprints every document with copydetect's
  ``CodeFingerprint`` (Python tokens by Pygments: names become ``V``/``F``/``O``, strings ``S``, comments and
  spacing go; k-grams of ``noise_t`` tokens, winnowed so every match of ``guarantee_t`` is found), with the
  k-grams of every ``boilerplate`` text (the starter code, the reference solution) removed first, so code a
  pair shares only because both started from, or ended at, the given code scores nothing. It compares every
  pair that shares a fingerprint with copydetect's ``compare_files`` and returns those whose ``score`` reaches
  ``params.display_t``, highest first. A pair that shares no fingerprint scores 0 and is never compared
  (``compare_files`` would say 0 too): only the pairs an upper bound lets through cost a comparison.
- A ``Pair`` has each side's share of its own fingerprinted tokens found in the other (``share_a``,
  ``share_b``: copydetect's two similarities), ``score`` = the larger (one file wholly inside a bigger one is as
  telling as two equal ones), the overlapping tokens, and each side's matched character slices
  ``[start, end)`` of the original text (copydetect maps them back through its filter's offsets).
- ``clusters(pairs, threshold=...)`` is the connected components of three or more documents over the pairs
  scoring at least ``threshold``: each a sorted list of keys, largest first.
- Python's ``hash`` is salted per process: fingerprints are compared only within one call, never stored.
- A similarity is a hint for a person to read the code, never a verdict (see docs/similarity.md).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from copydetect import CodeFingerprint

# Chosen on the bank's own variants (docs/similarity.md, ``python -m benchmarks.similarity --evaluate``): at these
# settings 74 of the 76 pairs of variants edited from one another reach DISPLAY_T, and 23 of the 182 pairs of
# different implementations do (7 of 149 with the solution excluded too, as a check runs), half as many as at
# copydetect's defaults (25/30), most of them in the smallest exercises, where there are few ways to write it.
NOISE_T = 40  # the shortest match that counts, in filtered characters (copydetect's default is 25)
GUARANTEE_T = 50  # every match this long is found (window 11)
DISPLAY_T = 0.33  # pairs scoring less are not kept
CLUSTER_T = 0.5  # clusters join documents over pairs scoring at least this
MAX_SLICES = 200  # matched fragments kept per side of a pair
BOUND_CHUNK = 8192  # shared hashes per slice of the bound's matrices


@dataclass(frozen=True)
class Params:
    """The detector's thresholds (copydetect's names); ``check`` refuses what it would misread."""

    noise_t: int = NOISE_T
    guarantee_t: int = GUARANTEE_T
    display_t: float = DISPLAY_T
    cluster_t: float = CLUSTER_T

    @property
    def window(self) -> int:
        return self.guarantee_t - self.noise_t + 1

    def problems(self) -> list[str]:
        """Return what is wrong with these parameters, in words (empty when they are fine)."""
        found = []
        if not 5 <= self.noise_t <= 200:
            found.append("noise_t must be 5..200 tokens")
        if not self.noise_t <= self.guarantee_t <= 400:
            found.append("guarantee_t must be at least noise_t and at most 400")
        if not 0.0 <= self.display_t <= 1.0:
            found.append("display_t must be 0..1")
        if not 0.0 <= self.cluster_t <= 1.0:
            found.append("cluster_t must be 0..1")
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "noise_t": self.noise_t, "guarantee_t": self.guarantee_t, "display_t": self.display_t,
            "cluster_t": self.cluster_t,
        }  # fmt: skip


@dataclass(frozen=True)
class Pair:
    """Two documents' similarity (``a`` < ``b`` by their order in the input) and what matched."""

    a: str
    b: str
    share_a: float
    share_b: float
    tokens: int
    slices_a: list[tuple[int, int]]
    slices_b: list[tuple[int, int]]

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)


def _copydetect() -> Any:
    os.environ.setdefault("MPLBACKEND", "Agg")  # copydetect imports pyplot for its HTML report; no screen here
    import copydetect

    return copydetect


def fingerprint(key: str, code: str, *, params: Params, boilerplate: Any = None) -> CodeFingerprint:
    """Return copydetect's fingerprint of ``code`` (Python), without the ``boilerplate`` hashes."""
    cd = _copydetect()
    return cd.CodeFingerprint(
        f"{key}.py", params.noise_t, params.window, boilerplate=boilerplate, language="python",
        fp=io.StringIO(code),
    )  # fmt: skip


def boilerplate_hashes(texts: Iterable[str], *, params: Params) -> Any:
    """Return every k-gram hash of ``texts`` (window 1, as copydetect's own boilerplate does)."""
    cd = _copydetect()
    hashes: list[int] = []
    for number, text in enumerate(texts):
        if text.strip():
            hashes.extend(cd.CodeFingerprint(f"boilerplate{number}.py", params.noise_t, 1, language="python",
                                             fp=io.StringIO(text)).hashes)  # fmt: skip
    return np.unique(np.array(hashes, dtype=np.int64))


def _candidates(prints: Sequence[CodeFingerprint], params: Params) -> list[tuple[int, int]]:
    """Return the pairs ``(i, j)``, ``i < j``, that may reach ``display_t``: a bound on what compare_files says.

    A side's overlap is a union of k-token windows at its matched fingerprint positions, so it is at most
    ``k`` times the number of those positions: ``matched[i, j]``, the positions of ``i`` whose hash ``j`` has
    too, is a product of an occurrence-count matrix and a presence matrix over the hashes two documents share.
    """
    index: dict[int, int] = {}
    seen_in: dict[int, int] = {}
    for fp in prints:
        for h in fp.hash_idx:
            seen_in[h] = seen_in.get(h, 0) + 1
    for h, count in seen_in.items():
        if count > 1:
            index[h] = len(index)
    n = len(prints)
    if not index or n < 2:
        return []
    matched = np.zeros((n, n), dtype=np.float32)  # [i, j]: positions of i whose hash j also has
    for first in range(0, len(index), BOUND_CHUNK):  # a slice of the shared hashes at a time bounds the memory
        width = min(BOUND_CHUNK, len(index) - first)
        counts = np.zeros((n, width), dtype=np.float32)
        for row, fp in enumerate(prints):
            for h, positions in fp.hash_idx.items():
                column = index.get(h, -1) - first
                if 0 <= column < width:
                    counts[row, column] = len(positions)
        matched += counts @ (counts > 0).astype(np.float32).T
    coverage = np.array([max(fp.token_coverage, 1.0) for fp in prints], dtype=np.float64)
    bound = np.minimum(matched * params.noise_t, coverage[:, None]) / coverage[:, None]
    reach = np.maximum(bound, bound.T) >= params.display_t
    reach &= (matched > 0) & (matched.T > 0)
    i, j = np.nonzero(np.triu(reach, k=1))
    return list(zip(i.tolist(), j.tolist(), strict=True))


def _slices(raw: Any) -> list[tuple[int, int]]:
    if raw.size == 0:
        return []
    starts, ends = raw
    return [(int(s), int(e)) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)][:MAX_SLICES]


def compare(
    documents: Sequence[tuple[str, str]], *, boilerplate: Iterable[str] = (), params: Params | None = None
) -> list[Pair]:
    """Return the pairs of ``documents`` (``(key, code)``) scoring at least ``display_t``, highest first."""
    params = params or Params()
    cd = _copydetect()
    excluded = boilerplate_hashes(boilerplate, params=params)
    prints = [fingerprint(key, code, params=params, boilerplate=excluded) for key, code in documents]
    pairs = []
    for i, j in _candidates(prints, params):
        tokens, (share_a, share_b), (slices_a, slices_b) = cd.compare_files(prints[i], prints[j])
        pair = Pair(
            a=documents[i][0], b=documents[j][0], share_a=float(share_a), share_b=float(share_b),
            tokens=int(tokens), slices_a=_slices(np.asarray(slices_a)), slices_b=_slices(np.asarray(slices_b)),
        )  # fmt: skip
        if pair.score >= params.display_t and pair.tokens > 0:
            pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, -p.tokens, p.a, p.b))
    return pairs


def clusters(pairs: Iterable[Pair], *, threshold: float) -> list[list[str]]:
    """Return the connected components of three or more keys over the pairs scoring at least ``threshold``."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for pair in pairs:
        if pair.score >= threshold:
            ra, rb = root(pair.a), root(pair.b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for key in parent:
        groups.setdefault(root(key), []).append(key)
    found = [sorted(group) for group in groups.values() if len(group) >= 3]
    return sorted(found, key=lambda g: (-len(g), g))
