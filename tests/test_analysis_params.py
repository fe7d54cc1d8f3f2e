"""Parameter-space measures on constructed weights with known answers.

Updates are built from explicit orthonormal bases, so the top-k subspaces (and therefore the
similarities) are known exactly: same span -> 1, disjoint spans -> 0, 2 of 5 shared -> 0.4.
PCA and distances are checked on points whose geometry is known by hand.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from analysis import params as P

F64 = torch.float64


def basis(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=F64))
    return q


def low_rank(u_cols: torch.Tensor, v_cols: torch.Tensor, sv) -> torch.Tensor:
    return u_cols @ torch.diag(torch.tensor(sv, dtype=F64)) @ v_cols.T


U, V = basis(12, 0), basis(9, 1)


def test_same_subspace_is_one_whatever_scale_sign_and_rotation():
    a = low_rank(U[:, :5], V[:, :5], [5, 4, 3, 2, 1])
    rot = basis(5, 7)  # rotation inside the span, other right vectors, other spectrum
    b = -3.0 * low_rank(U[:, :5] @ rot, V[:, 4:9], [1, 2, 3, 4, 5])
    assert P.subspace_similarity(a, b, k=5) == pytest.approx(1.0, abs=1e-10)
    assert P.subspace_similarity(a, a, k=5, side="both") == pytest.approx(1.0, abs=1e-10)


def test_orthogonal_and_partial_overlap():
    a = low_rank(U[:, :5], V[:, :5], [5, 4, 3, 2, 1])
    b = low_rank(U[:, 5:10], V[:, :5], [5, 4, 3, 2, 1])
    c = low_rank(U[:, 3:8], V[:, :5], [5, 4, 3, 2, 1])
    assert P.subspace_similarity(a, b, k=5) == pytest.approx(0.0, abs=1e-10)
    assert P.subspace_similarity(a, c, k=5) == pytest.approx(2 / 5, abs=1e-10)
    # same left space, disjoint right spaces: left 1, right 0, both 0.5
    d = low_rank(U[:, :5], V[:, 4:9], [5, 4, 3, 2, 1])
    a2 = low_rank(U[:, :4], V[:, :4], [5, 4, 3, 2])
    d2 = low_rank(U[:, :4], V[:, 4:8], [5, 4, 3, 2])
    assert P.subspace_similarity(a2, d2, k=4, side="right") == pytest.approx(0.0, abs=1e-10)
    assert P.subspace_similarity(a2, d2, k=4, side="both") == pytest.approx(0.5, abs=1e-10)
    assert P.subspace_similarity(a, d, side="right") == pytest.approx(P.subspace_similarity(a.T, d.T, side="left"))


def test_subspace_edge_cases():
    a = low_rank(U[:, :5], V[:, :5], [5, 4, 3, 2, 1])
    assert math.isnan(P.subspace_similarity(a, torch.zeros_like(a)))
    small = torch.randn(3, 2, dtype=F64)
    assert P.subspace_similarity(small, 2 * small, k=5) == pytest.approx(1.0)  # k capped at 2
    with pytest.raises(ValueError):
        P.subspace_similarity(a, a.T)
    with pytest.raises(ValueError):
        P.subspace_similarity(a, a, side="up")


def make_states():
    g = torch.Generator().manual_seed(3)
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.1.mlp.up_proj.weight"]
    w0 = {n: torch.randn(12, 9, generator=g, dtype=F64) for n in names}
    w0["model.layers.0.self_attn.q_proj.bias"] = torch.randn(12, generator=g, dtype=F64)
    upd = low_rank(U[:, :5], V[:, :5], [5, 4, 3, 2, 1])
    orth = low_rank(U[:, 5:10], V[:, :5], [5, 4, 3, 2, 1])
    final = {n: t + (upd if t.ndim == 2 else 1.0) for n, t in w0.items()}
    mid = {n: t + (0.5 * upd if t.ndim == 2 else 0.5) for n, t in w0.items()}
    wrong = {n: t + (orth if t.ndim == 2 else 0.0) for n, t in w0.items()}
    return w0, mid, wrong, final


def test_update_table_layers_and_summary():
    w0, mid, wrong, final = make_states()
    t = P.update_subspace_table(w0, mid, final, k=5)
    assert list(t["name"]) == sorted(n for n in w0 if w0[n].ndim == 2)  # bias skipped
    assert dict(zip(t["name"], t["layer"])) == {"model.embed_tokens.weight": -1,
                                                "model.layers.0.self_attn.q_proj.weight": 0,
                                                "model.layers.1.mlp.up_proj.weight": 1}
    assert "self_attn.q_proj" in set(t["module"])
    assert np.allclose(t["similarity"], 1.0)
    assert np.allclose(t["norm_mid"] * 2, t["norm_final"])
    s = P.summarise_subspace(t)
    assert list(s.index) == ["-1", "0", "1", "all"] and s.loc["all", "count"] == 3
    traj = P.subspace_trajectory(w0, {20: mid, 10: wrong}, final, k=5)
    assert list(traj["step"]) == [10, 20]
    assert traj["mean"].tolist() == pytest.approx([0.0, 1.0], abs=1e-10)


def test_cosines_of_tensors_dicts_and_checkpoint_chains():
    x = torch.tensor([1.0, 2.0, 0.0])
    assert P.cosine(x, 3 * x) == pytest.approx(1.0)
    assert P.cosine(x, -x) == pytest.approx(-1.0)
    assert P.cosine(x, torch.tensor([-2.0, 1.0, 5.0])) == pytest.approx(0.0)
    assert math.isnan(P.cosine(x, torch.zeros(3)))
    a = {"p": torch.tensor([1.0, 0.0]), "q": torch.tensor([[1.0]])}
    b = {"p": torch.tensor([1.0, 1.0]), "q": torch.tensor([[0.0]]), "extra": torch.ones(4)}
    assert P.cosine(a, b) == pytest.approx(1 / (math.sqrt(2) * math.sqrt(2)))
    d = {"w": torch.tensor([1.0, -1.0])}
    w0 = {"w": torch.tensor([5.0, 5.0])}
    chain = [w0, {"w": w0["w"] + d["w"]}, {"w": w0["w"] + 2 * d["w"]}, {"w": w0["w"] + d["w"]}]
    assert P.consecutive_cosines(chain) == pytest.approx([1.0, -1.0])
    deltas = [d, {"w": 2 * d["w"]}, {"w": torch.tensor([1.0, 1.0])}]
    assert P.consecutive_cosines(deltas, deltas=True) == pytest.approx([1.0, 0.0])
    assert P.paired_cosines(deltas[:2], [d, {"w": -d["w"]}]) == pytest.approx([1.0, -1.0])
    with pytest.raises(ValueError):
        P.paired_cosines(deltas, deltas[:1])


def test_pca_of_points_on_a_line_and_agreement_with_numpy():
    t = np.array([0.0, 1.0, 2.0, 4.0])
    u = np.array([3.0, 4.0, 0.0, 0.0]) / 5.0
    pts = np.array([1.0, -2.0, 0.5, 7.0]) + t[:, None] * u[None, :]
    coords, ratio = P.checkpoint_pca(pts)
    assert coords[:, 0] == pytest.approx(t - t.mean(), abs=1e-9)  # sign rule: largest |.| positive
    assert np.abs(coords[:, 1]).max() < 1e-7
    assert ratio == pytest.approx([1.0, 0.0], abs=1e-9)
    # the same points as state dicts split over two tensors give the same coordinates
    states = [{"a": torch.tensor(p[:3]), "b": torch.tensor(p[3:]).reshape(1, 1)} for p in pts]
    from_states = P.checkpoint_pca(states)[0]
    assert from_states[:, 0] == pytest.approx(coords[:, 0], abs=1e-9)
    assert np.abs(from_states[:, 1]).max() < 1e-7  # sqrt of a round-off eigenvalue, ~1e-8
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 40))
    c, r = P.checkpoint_pca(x, n_components=3)
    xc = x - x.mean(0)
    uu, ss, _ = np.linalg.svd(xc, full_matrices=False)
    assert np.abs(c) == pytest.approx(np.abs(uu[:, :3] * ss[:3]), abs=1e-8)
    assert r == pytest.approx(ss[:3] ** 2 / (ss ** 2).sum())


def test_distance_matrix_known_values_and_precision():
    pts = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
    want = np.array([[0, 5, 10], [5, 0, 5], [10, 5, 0]], dtype=float)
    d = P.pairwise_distances(pts)
    assert d == pytest.approx(want)
    assert np.array_equal(d, d.T) and np.all(np.diag(d) == 0)
    states = [{"x": torch.tensor([p[0]]), "y": torch.tensor([[p[1]]])} for p in pts]
    assert P.pairwise_distances(states) == pytest.approx(want)
    big = torch.full((1000,), 1e4, dtype=F64)
    close = [{"w": big}, {"w": big + torch.cat([torch.tensor([3e-3, 4e-3], dtype=F64), torch.zeros(998, dtype=F64)])}]
    assert P.pairwise_distances(close)[0, 1] == pytest.approx(5e-3, rel=1e-9)


def test_load_state_dict_single_sharded_and_missing(tmp_path):
    a = {"w": torch.arange(6.0).reshape(2, 3)}
    b = {"v": torch.ones(2)}
    (tmp_path / "one").mkdir()
    save_file(a, str(tmp_path / "one" / "model.safetensors"))
    assert torch.equal(P.load_state_dict(tmp_path / "one")["w"], a["w"])
    assert torch.equal(P.load_state_dict(tmp_path / "one" / "model.safetensors")["w"], a["w"])
    sh = tmp_path / "sharded"
    sh.mkdir()
    save_file(a, str(sh / "model-00001-of-00002.safetensors"))
    save_file(b, str(sh / "model-00002-of-00002.safetensors"))
    (sh / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}}))
    assert sorted(P.load_state_dict(sh)) == ["v", "w"]
    with pytest.raises(FileNotFoundError):
        P.load_state_dict(tmp_path)
    deltas = P.update_deltas({"w": a["w"], "i": torch.ones(2, dtype=torch.long)}, {"w": a["w"] + 1, "i": torch.zeros(2, dtype=torch.long)})
    assert list(deltas) == ["w"] and torch.all(deltas["w"] == 1)
