"""Parameter-space measures of training: where updates point and how far checkpoints move.

Why: the Physics paper argues that OPD shapes planning patterns through *consistent* update
directions (Figs. 9-10) and that MOPD moves the student only a little (Fig. 22). These
functions turn checkpoints into those numbers. Inputs are state dicts (name -> tensor), e.g.
from `load_state_dict` on a Hugging Face checkpoint folder; outputs are floats, numpy arrays
and pandas tables. Nothing here plots (see `analysis.figures`).

Definitions used throughout:

* An *update* of matrix W from a base checkpoint 0 is ``dW = W - W_0``.
* Top-k subspace similarity of two updates A, B (same shape m x n): take the top-k left
  singular vectors ``U_A, U_B`` (m x k, orthonormal columns) and report
  ``||U_A^T U_B||_F^2 / k`` -- the mean squared cosine of the k principal angles between the two
  k-dimensional subspaces. It is 1 for the same subspace, 0 for orthogonal ones, invariant to
  the sign, scale and in-subspace rotation of either update, and about ``k / m`` for random
  subspaces. ``side="right"`` uses the right singular vectors (row space), ``"both"`` the mean
  of the two. k is capped at ``min(m, n)``. An all-zero update has no subspace: NaN. When
  singular values tie at position k the subspace is not unique and the value is arbitrary
  between the tied choices (rare for trained weights).
* Direction comparisons use the cosine of flattened updates, accumulated tensor by tensor in
  float64 so a 100M-parameter model is never concatenated into one vector.
* PCA of N checkpoints uses the N x N centred Gram matrix (exactly equivalent to an SVD of the
  centred N x P data matrix, whose coordinates are ``U S``), so memory is O(N^2 + N * largest
  tensor). Component signs are fixed so that each component's largest-magnitude coordinate is
  positive.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

StateDict = Mapping[str, torch.Tensor]

__all__ = ["load_state_dict", "common_keys", "update_deltas", "subspace_similarity",
           "update_subspace_table", "summarise_subspace", "subspace_trajectory", "cosine",
           "consecutive_cosines", "paired_cosines", "checkpoint_pca", "pairwise_distances"]

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


# ----------------------------------------------------------------------------- loading
def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file, or of the ``model.safetensors`` (or its sharded index) in a
    checkpoint folder. Tied weights saved once (``lm_head`` absent) simply stay absent."""
    from safetensors.torch import load_file

    p = Path(path)
    if p.is_file():
        return load_file(str(p))
    single = p / "model.safetensors"
    if single.is_file():
        return load_file(str(single))
    index = p / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        out: dict[str, torch.Tensor] = {}
        for shard in shards:
            out.update(load_file(str(p / shard)))
        return out
    raise FileNotFoundError(f"no model.safetensors (or sharded index) in {p}")


def common_keys(states: Sequence[StateDict], names: Optional[Iterable[str]] = None,
                min_ndim: int = 0) -> list[str]:
    """Sorted floating-point keys present in every state with one shape and ``ndim >= min_ndim``."""
    if not states:
        return []
    keys = set(names) if names is not None else set(states[0])
    out = []
    for k in sorted(keys):
        ts = [s.get(k) for s in states]
        if any(t is None for t in ts) or not ts[0].is_floating_point():
            continue
        if ts[0].ndim < min_ndim or any(t.shape != ts[0].shape for t in ts):
            continue
        out.append(k)
    return out


def update_deltas(base: StateDict, other: StateDict, names: Optional[Iterable[str]] = None) -> dict[str, torch.Tensor]:
    """``other - base`` (float64) for every shared floating tensor of equal shape."""
    return {k: other[k].double() - base[k].double() for k in common_keys([base, other], names)}


# ----------------------------------------------------------------------------- subspaces
def _top_vectors(m: torch.Tensor, k: int, side: str) -> Optional[torch.Tensor]:
    m = m.detach().double().cpu()
    if not torch.any(m != 0):
        return None
    u, _, vh = torch.linalg.svd(m, full_matrices=False)
    return u[:, :k] if side == "left" else vh[:k].T


def subspace_similarity(a: torch.Tensor, b: torch.Tensor, k: int = 5, side: str = "left") -> float:
    """``||U_a^T U_b||_F^2 / k`` over top-k singular vectors of two same-shape 2-D matrices."""
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"need two 2-D matrices of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if side == "both":
        return 0.5 * (subspace_similarity(a, b, k, "left") + subspace_similarity(a, b, k, "right"))
    if side not in ("left", "right"):
        raise ValueError("side must be 'left', 'right' or 'both'")
    k = max(1, min(int(k), *a.shape))
    ua, ub = _top_vectors(a, k, side), _top_vectors(b, k, side)
    if ua is None or ub is None:
        return float("nan")
    return float((ua.T @ ub).pow(2).sum() / k)


def _module_name(name: str) -> str:
    m = _LAYER.search(name)
    tail = name[m.end():] if m else name
    return tail[:-len(".weight")] if tail.endswith(".weight") else tail


def update_subspace_table(w0: StateDict, w_mid: StateDict, w_final: StateDict, k: int = 5,
                          side: str = "left", names: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """One row per 2-D matrix: similarity of the top-k subspaces of ``W_mid - W_0`` and ``W_final - W_0``.

    Columns: name, layer (int from ``layers.<i>.``, -1 for embeddings/head), module, rows, cols,
    k (effective), similarity, norm_mid, norm_final (Frobenius norms of the two updates).
    """
    rows = []
    for name in common_keys([w0, w_mid, w_final], names, min_ndim=2):
        if w0[name].ndim != 2:
            continue
        base = w0[name].double()
        dm, df = w_mid[name].double() - base, w_final[name].double() - base
        m = _LAYER.search(name)
        rows.append({"name": name, "layer": int(m.group(1)) if m else -1, "module": _module_name(name),
                     "rows": base.shape[0], "cols": base.shape[1], "k": min(k, *base.shape),
                     "similarity": subspace_similarity(dm, df, k, side),
                     "norm_mid": float(dm.norm()), "norm_final": float(df.norm())})
    return pd.DataFrame(rows, columns=["name", "layer", "module", "rows", "cols", "k", "similarity",
                                       "norm_mid", "norm_final"])


def summarise_subspace(table: pd.DataFrame, by: str = "layer") -> pd.DataFrame:
    """Mean / std / count of ``similarity`` per ``by`` value plus an ``all`` row (NaNs skipped)."""
    g = table.groupby(by)["similarity"].agg(["mean", "std", "count"])
    g.index = g.index.map(str)
    s = table["similarity"]
    g.loc["all"] = [s.mean(), s.std(), int(s.count())]
    g["count"] = g["count"].astype(int)
    return g


def subspace_trajectory(w0: StateDict, checkpoints: Mapping[int, StateDict], w_final: StateDict,
                        k: int = 5, side: str = "left", names: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """Fig. 10 curve: per intermediate step, mean/std/min/max similarity over matrices."""
    rows = []
    for step in sorted(checkpoints):
        s = update_subspace_table(w0, checkpoints[step], w_final, k, side, names)["similarity"]
        rows.append({"step": step, "mean": s.mean(), "std": s.std(), "min": s.min(), "max": s.max(),
                     "n_matrices": int(s.count())})
    return pd.DataFrame(rows, columns=["step", "mean", "std", "min", "max", "n_matrices"])


# ----------------------------------------------------------------------------- directions
def _as_parts(x, keys: Optional[list[str]]) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x.reshape(-1)]
    return [x[k].reshape(-1) for k in keys]


def cosine(a, b, names: Optional[Iterable[str]] = None) -> float:
    """Cosine of two flattened vectors; ``a`` and ``b`` are tensors or state dicts (shared keys).

    NaN when either vector is zero."""
    keys = None if isinstance(a, torch.Tensor) else common_keys([a, b], names)
    dot = na = nb = 0.0
    for x, y in zip(_as_parts(a, keys), _as_parts(b, keys)):
        x, y = x.detach().double(), y.detach().double()
        dot += float(x @ y)
        na += float(x @ x)
        nb += float(y @ y)
    if na == 0.0 or nb == 0.0:
        return float("nan")
    return dot / (na ** 0.5 * nb ** 0.5)


def consecutive_cosines(items: Sequence, deltas: bool = False) -> list[float]:
    """Cosine between consecutive step updates (Fig. 9's direction consistency).

    ``items`` are checkpoints (``deltas=False``: updates are ``W_{t+1} - W_t``, giving N-2 values)
    or already updates / gradients (``deltas=True``: N-1 values)."""
    if not deltas:
        items = [update_deltas(items[i], items[i + 1]) for i in range(len(items) - 1)]
    return [cosine(items[i], items[i + 1]) for i in range(len(items) - 1)]


def paired_cosines(a: Sequence, b: Sequence) -> list[float]:
    """Cosine of the i-th update of one method with the i-th of another (e.g. GRPO vs OPD)."""
    if len(a) != len(b):
        raise ValueError("both methods need the same number of updates")
    return [cosine(x, y) for x, y in zip(a, b)]


# ----------------------------------------------------------------------------- dynamics (Fig. 22)
def _points_or_states(items) -> tuple[Optional[np.ndarray], list[StateDict], list[str]]:
    if isinstance(items, np.ndarray):
        if items.ndim != 2:
            raise ValueError("a point array must be 2-D (N x P)")
        return items.astype(np.float64), [], []
    states = list(items)
    return None, states, common_keys(states)


def _gram(items, centre: bool) -> np.ndarray:
    x, states, keys = _points_or_states(items)
    if x is not None:
        if centre:
            x = x - x.mean(0, keepdims=True)
        return x @ x.T
    n = len(states)
    g = np.zeros((n, n))
    for k in keys:
        block = torch.stack([s[k].detach().double().reshape(-1) for s in states])
        if centre:
            block = block - block.mean(0, keepdim=True)
        g += (block @ block.T).numpy()
    return g


def checkpoint_pca(items, n_components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """PCA coordinates (N x n_components) and explained-variance ratios of N checkpoints.

    ``items`` is a list of state dicts or an N x P array of flattened points."""
    g = _gram(items, centre=True)
    u, s, _ = np.linalg.svd(g, hermitian=True)  # g = U diag(S^2) U^T of the centred data
    s = np.clip(s, 0.0, None)
    coords = u * np.sqrt(s)[None, :]
    coords = coords[:, :n_components]
    if coords.shape[1] < n_components:
        coords = np.pad(coords, ((0, 0), (0, n_components - coords.shape[1])))
    for j in range(coords.shape[1]):
        i = int(np.argmax(np.abs(coords[:, j])))
        if coords[i, j] < 0:
            coords[:, j] = -coords[:, j]
    total = s.sum()
    ratio = s[:n_components] / total if total > 0 else np.zeros(min(n_components, len(s)))
    return coords, np.pad(ratio, (0, n_components - len(ratio)))


def pairwise_distances(items) -> np.ndarray:
    """Symmetric N x N matrix of L2 distances between flattened checkpoints (zero diagonal).

    Differences are taken tensor by tensor in float64, not through ||a||^2 + ||b||^2 - 2ab,
    so nearby checkpoints (the paper's 0.48 next to 71) keep their precision."""
    x, states, keys = _points_or_states(items)
    n = x.shape[0] if x is not None else len(states)
    d2 = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            if x is not None:
                v = float(((x[i] - x[j]) ** 2).sum())
            else:
                v = sum(float((states[i][k].double() - states[j][k].double()).pow(2).sum()) for k in keys)
            d2[i, j] = d2[j, i] = v
    return np.sqrt(d2)
