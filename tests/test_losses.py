"""Checks posttrain.losses against slow pure-Python references and for micro-batch invariance.

Batches are small, in float64, with environment tokens between agent turns, turns of uneven
length, trailing padding and an episode with no agent token at all, so that masking and
normalisation mistakes show up as numeric differences.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from posttrain import losses as L

F64 = torch.float64
SETTINGS = settings(max_examples=40, deadline=None)


# ----------------------------------------------------------------------------- fixtures
def make_layout(seed: int, batch: int = 6, length: int = 24):
    """agent_mask / turn_index with a prompt, uneven agent turns, env replies and padding."""
    rng = random.Random(seed)
    mask = torch.zeros(batch, length, dtype=torch.long)
    turn = torch.full((batch, length), -1, dtype=torch.long)
    for b in range(batch):
        if b == batch - 1:  # an episode that ended before its first agent token
            continue
        pos, k = rng.randint(1, 3), 0
        while pos < length - 1 and k < 5:
            n = min(rng.randint(1, 4), length - pos)
            mask[b, pos:pos + n] = 1
            turn[b, pos:pos + n] = k
            pos += n + rng.randint(1, 3)
            k += 1
            if rng.random() < 0.15:
                break
    return mask, turn


def rand_batch(seed: int, batch: int = 6, length: int = 24, vocab: int = 7):
    g = torch.Generator().manual_seed(seed)
    mask, turn = make_layout(seed, batch, length)
    student = torch.randn(batch, length, vocab, generator=g, dtype=F64) * 1.5
    teacher = torch.randn(batch, length, vocab, generator=g, dtype=F64) * 1.5
    ids = torch.randint(0, vocab, (batch, length), generator=g)
    old = torch.randn(batch, length, generator=g, dtype=F64) * 0.3 - 1.0
    ref = torch.randn(batch, length, generator=g, dtype=F64) * 0.3 - 1.0
    return dict(mask=mask, turn=turn, student=student, teacher=teacher, ids=ids, old=old, ref=ref)


def logp_of(logits, ids):
    return F.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def log_softmax_list(xs):
    m = max(xs)
    z = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - z for x in xs]


def ref_group_norm(values, groups, scale=True, eps=1e-6, unbiased=False):
    out = []
    for v, g in zip(values, groups):
        members = [x for x, h in zip(values, groups) if h == g]
        if max(members) == min(members):
            out.append(0.0)
            continue
        mean = sum(members) / len(members)
        if not scale:
            out.append(v - mean)
            continue
        dof = len(members) - 1 if unbiased else len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / dof)
        out.append((v - mean) / (std + eps))
    return out


def ref_kl(p_logits, q_logits):
    lp, lq = log_softmax_list(p_logits), log_softmax_list(q_logits)
    return sum(math.exp(a) * (a - b) for a, b in zip(lp, lq))


# ----------------------------------------------------------------------------- advantages
@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 1.0, 0.5, 2.0])), min_size=1, max_size=12),
       st.booleans(), st.booleans())
def test_grpo_advantages_match_reference(pairs, scale, unbiased):
    groups = [g for g, _ in pairs]
    rewards = [r for _, r in pairs]
    got = L.grpo_advantages(torch.tensor(rewards, dtype=F64), torch.tensor(groups), scale_by_std=scale, unbiased=unbiased)
    want = ref_group_norm(rewards, groups, scale, unbiased=unbiased)
    assert torch.allclose(got, torch.tensor(want, dtype=F64), atol=1e-9)


def test_grpo_population_std_and_equal_groups():
    # group 7: rewards 1,0 -> mean .5, population std .5 -> +-1; group 3: all equal -> 0
    adv = L.grpo_advantages(torch.tensor([1.0, 0.0, 0.1, 0.1, 0.1], dtype=F64), torch.tensor([7, 7, 3, 3, 3]), eps=0.0)
    assert adv.tolist() == [1.0, -1.0, 0.0, 0.0, 0.0]
    samp = L.grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), eps=0.0, unbiased=True)
    assert torch.allclose(samp, torch.tensor([0.5, -0.5]) / math.sqrt(0.5))
    ints = L.grpo_advantages(torch.tensor([1, 0, 0, 0]), torch.tensor([0, 0, 0, 0]), scale_by_std=False)
    assert torch.allclose(ints, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_process_advantages_and_combination_match_reference():
    mask, turn = make_layout(3)
    b, k = mask.shape[0], 5
    g = torch.Generator().manual_seed(0)
    steps = torch.randint(0, 2, (b, k), generator=g).to(F64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    outcome = torch.tensor([0.3, -0.2, 0.1, 0.0, 1.0, -1.0], dtype=F64)
    proc = L.process_advantages(steps, turn, mask, groups)
    # reference: pool (group, value) over turns that have agent tokens
    present = {(bb, int(turn[bb, t])) for bb in range(b) for t in range(mask.shape[1]) if mask[bb, t]}
    cells = sorted(present)
    vals = [float(steps[bb, kk]) for bb, kk in cells]
    normed = dict(zip(cells, ref_group_norm(vals, [int(groups[bb]) for bb, _ in cells])))
    for bb in range(b):
        for kk in range(k):
            assert abs(float(proc[bb, kk]) - normed.get((bb, kk), 0.0)) < 1e-9
    tok = L.combine_advantages(outcome, mask, turn, proc, process_weight=0.5)
    for bb in range(b):
        for t in range(mask.shape[1]):
            want = float(outcome[bb]) + 0.5 * normed[(bb, int(turn[bb, t]))] if mask[bb, t] else 0.0
            assert abs(float(tok[bb, t]) - want) < 1e-9
    plain = L.combine_advantages(outcome, mask, turn, proc, process_weight=0.0)
    assert torch.equal(plain, torch.where(mask.bool(), outcome[:, None].expand_as(plain), torch.zeros_like(plain)))


def test_turn_index_validation():
    mask = torch.tensor([[1, 1]])
    with pytest.raises(ValueError):
        L.broadcast_turn_values(torch.zeros(1, 2), torch.tensor([[0, 2]]), mask)
    with pytest.raises(ValueError):
        L.turn_weights(torch.tensor([[0, -1]]), mask, 0.5)


# ----------------------------------------------------------------------------- policy gradient and reference KL
def test_ppo_loss_matches_reference():
    d = rand_batch(1)
    mask = d["mask"]
    new = logp_of(d["student"], d["ids"])
    adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(5), dtype=F64)
    eps = 0.2
    loss = L.policy_gradient_loss(new, d["old"], adv, mask, clip_eps=eps)
    total, count = 0.0, 0
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[b, t]:
                r = math.exp(float(new[b, t]) - float(d["old"][b, t]))
                a = float(adv[b, t])
                total += -min(r * a, min(max(r, 1 - eps), 1 + eps) * a)
                count += 1
    assert abs(float(loss) - total / count) < 1e-10
    # per-episode advantages broadcast over the row
    ep = torch.randn(mask.shape[0], generator=torch.Generator().manual_seed(6), dtype=F64)
    a1 = L.policy_gradient_loss(new, d["old"], ep, mask)
    a2 = L.policy_gradient_loss(new, d["old"], ep[:, None].expand_as(new), mask)
    assert torch.allclose(a1, a2)


def test_masked_positions_cannot_poison_the_loss():
    d = rand_batch(2)
    mask = d["mask"]
    new = logp_of(d["student"], d["ids"]).detach().requires_grad_(True)
    old = torch.where(mask.bool(), d["old"], torch.full_like(d["old"], -1e4))  # exp(1e4) overflows
    loss = L.policy_gradient_loss(new, old, torch.ones_like(new), mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(new.grad).all()
    assert (new.grad[~mask.bool()] == 0).all()


@pytest.mark.parametrize("est", ["k1", "k2", "k3"])
def test_reference_kl_estimators_match_reference(est):
    d = rand_batch(4)
    mask = d["mask"]
    logp = logp_of(d["student"], d["ids"])
    per = L.kl_to_reference_per_token(logp, d["ref"], mask, est)
    vals = []
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            lr = float(d["ref"][b, t]) - float(logp[b, t])
            want = {"k1": -lr, "k2": 0.5 * lr * lr, "k3": math.exp(lr) - 1 - lr}[est] if mask[b, t] else 0.0
            assert abs(float(per[b, t]) - want) < 1e-10
            if mask[b, t]:
                vals.append(want)
    loss = L.kl_to_reference_loss(logp, d["ref"], mask, est)
    assert abs(float(loss) - sum(vals) / len(vals)) < 1e-10
    if est != "k1":
        assert (per >= 0).all()
    with pytest.raises(ValueError):
        L.kl_to_reference_per_token(logp, d["ref"], mask, "k4")


def test_clip_fraction_and_entropy():
    d = rand_batch(5)
    mask = d["mask"].bool()
    new = d["old"].clone()
    new[mask] += torch.linspace(-0.5, 0.5, int(mask.sum()), dtype=F64)
    r = torch.exp(new - d["old"])[mask]
    assert L.clip_fraction(new, d["old"], mask, 0.2) == pytest.approx(float(((r < 0.8) | (r > 1.2)).double().mean()))
    ent = L.token_entropy(d["student"], mask)
    for b, t in [(0, int(mask[0].nonzero()[0])), (1, int(mask[1].nonzero()[-1]))]:
        lp = log_softmax_list(d["student"][b, t].tolist())
        assert abs(float(ent[b, t]) + sum(math.exp(x) * x for x in lp)) < 1e-10
    assert (ent[~mask] == 0).all()


# ----------------------------------------------------------------------------- distillation KL
def test_reverse_kl_full_matches_reference_and_is_masked():
    d = rand_batch(6)
    mask = d["mask"]
    teacher = d["teacher"].clone().requires_grad_(True)
    kl = L.reverse_kl_full(d["student"].clone().requires_grad_(True), teacher, mask)
    kl.sum().backward()
    assert teacher.grad is None  # the teacher is a fixed target
    kl = kl.detach()
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            want = ref_kl(d["student"][b, t].tolist(), d["teacher"][b, t].tolist()) if mask[b, t] else 0.0
            assert abs(float(kl[b, t]) - want) < 1e-10


def ref_topk(s_logits, t_logits, k, estimator, support="teacher"):
    """Brute force from the definitions: the support, then the estimator, in plain Python."""
    def top(xs):
        return set(sorted(range(len(xs)), key=lambda v: -xs[v])[:k])
    S = {"student": top(s_logits), "teacher": top(t_logits), "union": top(s_logits) | top(t_logits)}[support]
    ls, lt = log_softmax_list(s_logits), log_softmax_list(t_logits)
    if estimator == "renormalized":
        order = sorted(S)
        rs, rt = log_softmax_list([ls[v] for v in order]), log_softmax_list([lt[v] for v in order])
        return sum(math.exp(a) * (a - b) for a, b in zip(rs, rt))
    inner = sum(math.exp(ls[v]) * (ls[v] - lt[v]) for v in S)
    if estimator == "truncated":
        return inner
    p_out = sum(math.exp(ls[v]) for v in range(len(ls)) if v not in S)
    q_out = sum(math.exp(lt[v]) for v in range(len(lt)) if v not in S)
    return inner + (p_out * math.log(p_out / q_out) if p_out > 0 else 0.0)


ESTIMATORS = ("tail", "renormalized", "truncated")


@pytest.mark.parametrize("support", ["teacher", "student", "union"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("k", [1, 3, 6])
def test_reverse_kl_topk_matches_brute_force(k, estimator, support):
    d = rand_batch(7)
    mask = d["mask"]
    kl = L.reverse_kl_topk(d["student"], mask, k, teacher_logits=d["teacher"], support=support, estimator=estimator)
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            want = ref_topk(d["student"][b, t].tolist(), d["teacher"][b, t].tolist(), k, estimator, support) \
                if mask[b, t] else 0.0
            assert abs(float(kl[b, t]) - want) < 1e-10
    if support == "union":
        return
    # the same numbers when the teacher only answers with its log-probs on the support's ids
    idx = L.topk_indices(d["teacher"] if support == "teacher" else d["student"], k)
    via = L.reverse_kl_topk(d["student"], mask, teacher_indices=idx, estimator=estimator,
                            teacher_logprobs=L.teacher_topk_logprobs(d["teacher"], idx))
    assert torch.allclose(kl, via, atol=1e-12)


@pytest.mark.parametrize("support", ["teacher", "student", "union"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_topk_with_k_equal_vocab_is_full_kl(estimator, support):
    d = rand_batch(8)
    full = L.reverse_kl_full(d["student"], d["teacher"], d["mask"])
    top = L.reverse_kl_topk(d["student"], d["mask"], d["student"].shape[-1], teacher_logits=d["teacher"],
                            estimator=estimator, support=support)
    assert torch.allclose(full, top, atol=1e-12)


def test_the_tail_bucket_sees_what_the_student_top_k_cannot():
    """The audit's hand case: the student is sure of a token the teacher rules out.  On the
    student's own top-k, renormalised, loss and gradient are exactly 0 while the true reverse KL
    is large; the tail estimator on the teacher's top-k sees it, stays below the full KL, and
    its gradient pushes the student's mass back."""
    stu = torch.tensor([[[6.0, 6.0, 0.0, 0.0, 0.0]]], dtype=F64, requires_grad=True)
    tea = torch.tensor([[[6.0, 6.0, 0.0, 0.0, 0.0]]], dtype=F64)
    tea_off = torch.tensor([[[-3.0, -3.0, 4.0, 4.0, 0.0]]], dtype=F64)   # the teacher wants tokens 2, 3
    one = torch.ones(1, 1)
    full = float(L.reverse_kl_full(stu.detach(), tea_off, one))
    blind = L.reverse_kl_topk(stu, one, 2, teacher_logits=tea_off, support="student", estimator="renormalized")
    blind.sum().backward()
    assert full > 4 and float(blind.detach()) == pytest.approx(0.0, abs=1e-12) and stu.grad.abs().max() < 1e-12
    stu.grad = None
    tail = L.reverse_kl_topk(stu, one, 2, teacher_logits=tea_off)          # defaults: teacher top-k + tail
    tail.sum().backward()
    assert 0.5 * full < float(tail.detach()) <= full + 1e-12
    assert stu.grad[0, 0, 0] > 0 and stu.grad[0, 0, 2] < 0                 # descent moves mass to token 2
    assert float(L.reverse_kl_topk(stu.detach(), one, 2, teacher_logits=tea)) == pytest.approx(0.0, abs=1e-12)


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 7), st.floats(0.1, 5.0), st.sampled_from(["teacher", "student", "union"]))
def test_tail_estimator_lies_between_zero_and_the_full_kl(seed, k, scale, support):
    g = torch.Generator().manual_seed(seed)
    s, t = torch.randn(2, 3, 7, generator=g, dtype=F64) * scale, torch.randn(2, 3, 7, generator=g, dtype=F64) * scale
    mask = torch.ones(2, 3)
    full = L.reverse_kl_full(s, t, mask)
    tail = L.reverse_kl_topk(s, mask, k, teacher_logits=t, support=support)
    assert (full >= -1e-12).all() and (tail >= -1e-12).all() and (tail <= full + 1e-10).all()
    assert (L.reverse_kl_topk(s, mask, k, teacher_logits=t, estimator="renormalized") >= -1e-12).all()


def test_truncated_sum_can_be_negative_and_identical_models_give_zero():
    d = rand_batch(9)
    mask, s = d["mask"], d["student"]
    for est in ESTIMATORS:
        assert L.reverse_kl_topk(s, mask, 3, teacher_logits=s.clone(), estimator=est).abs().max() < 1e-12
    stu, tea = torch.tensor([[[1.0, 0.0, 0.0]]], dtype=F64), torch.tensor([[[5.0, 0.0, 0.0]]], dtype=F64)
    one = torch.ones(1, 1)
    assert float(L.reverse_kl_topk(stu, one, 1, teacher_logits=tea, estimator="truncated")) < 0
    assert float(L.reverse_kl_topk(stu, one, 1, teacher_logits=tea)) > 0


@pytest.mark.parametrize("support", ["teacher", "union"])
def test_tail_gradient_matches_finite_differences(support):
    g = torch.Generator().manual_seed(12)
    s0 = torch.randn(1, 1, 6, generator=g, dtype=F64) * 2
    t = torch.randn(1, 1, 6, generator=g, dtype=F64) * 2
    one = torch.ones(1, 1)
    s = s0.clone().requires_grad_(True)
    L.reverse_kl_topk(s, one, 2, teacher_logits=t, support=support).sum().backward()
    h = 1e-6
    for v in range(6):
        e = torch.zeros(6, dtype=F64)
        e[v] = h
        up = ref_topk((s0[0, 0] + e).tolist(), t[0, 0].tolist(), 2, "tail", support)
        dn = ref_topk((s0[0, 0] - e).tolist(), t[0, 0].tolist(), 2, "tail", support)
        assert abs((up - dn) / (2 * h) - float(s.grad[0, 0, v])) < 1e-6


def test_topk_gradient_support_and_teacher_is_detached():
    d = rand_batch(10)
    s = d["student"].clone().requires_grad_(True)
    t = d["teacher"].clone().requires_grad_(True)
    L.reverse_kl_topk(s, d["mask"], 2, teacher_logits=t, support="student", estimator="renormalized").sum().backward()
    assert t.grad is None
    touched = (s.grad != 0).sum(-1)
    assert touched.max() == 2 and (touched[~d["mask"].bool()] == 0).all()
    s.grad = None
    L.reverse_kl_topk(s, d["mask"], 2, teacher_logits=t).sum().backward()     # the tail reaches every logit
    assert ((s.grad != 0).sum(-1)[d["mask"].bool()] == s.shape[-1]).all()
    with pytest.raises(ValueError):
        L.reverse_kl_topk(d["student"], d["mask"], 2)
    with pytest.raises(ValueError):
        L.reverse_kl_topk(d["student"], d["mask"], 2, teacher_logits=t, support="both")
    with pytest.raises(ValueError):
        L.topk_indices(d["student"], 99)


def test_full_kl_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(11)
    s = torch.randn(1, 1, 5, generator=g, dtype=F64).requires_grad_(True)
    t = torch.randn(1, 1, 5, generator=g, dtype=F64)
    L.reverse_kl_full(s, t, torch.ones(1, 1)).sum().backward()
    h = 1e-6
    for v in range(5):
        e = torch.zeros(5, dtype=F64)
        e[v] = h
        up = ref_kl((s.detach()[0, 0] + e).tolist(), t[0, 0].tolist())
        dn = ref_kl((s.detach()[0, 0] - e).tolist(), t[0, 0].tolist())
        assert abs((up - dn) / (2 * h) - float(s.grad[0, 0, v])) < 1e-6


# ----------------------------------------------------------------------------- TurnOPD weights
def ref_turn_weights(mask, turn, alpha):
    out = torch.zeros(mask.shape, dtype=F64)
    for b in range(mask.shape[0]):
        toks = [t for t in range(mask.shape[1]) if mask[b, t]]
        if not toks:
            continue
        per_turn = {}
        for t in toks:
            per_turn.setdefault(int(turn[b, t]), []).append(t)
        for k, members in per_turn.items():
            for t in members:
                out[b, t] = (1 - alpha) / len(toks) + alpha / (len(per_turn) * len(members))
    return out


@SETTINGS
@given(st.integers(0, 10_000), st.floats(0.0, 1.0))
def test_turn_weights_match_reference_and_sum_to_one(seed, alpha):
    mask, turn = make_layout(seed)
    w = L.turn_weights(turn, mask, alpha, dtype=F64)
    assert torch.allclose(w, ref_turn_weights(mask, turn, alpha), atol=1e-12)
    sums = w.sum(1)
    has = mask.bool().any(1)
    assert torch.allclose(sums[has], torch.ones(int(has.sum()), dtype=F64), atol=1e-12)
    assert (sums[~has] == 0).all()


def test_turn_weights_extremes_by_hand():
    # one episode: turn 0 has 3 tokens, turn 1 has 1 token, env token between
    mask = torch.tensor([[1, 1, 1, 0, 1]])
    turn = torch.tensor([[0, 0, 0, -1, 1]])
    assert torch.allclose(L.turn_weights(turn, mask, 0.0), torch.tensor([[0.25, 0.25, 0.25, 0, 0.25]]))
    assert torch.allclose(L.turn_weights(turn, mask, 1.0), torch.tensor([[1 / 6, 1 / 6, 1 / 6, 0, 0.5]]))
    with pytest.raises(ValueError):
        L.turn_weights(turn, mask, 1.5)


def test_alpha_schedule():
    assert L.alpha_at(0, 101) == 0.0
    assert L.alpha_at(100, 101) == 1.0
    assert L.alpha_at(50, 101) == pytest.approx(0.5)
    assert L.alpha_at(25, 101, start=0.5) == 0.0 and L.alpha_at(75, 101, start=0.5) == pytest.approx(0.5)
    assert L.alpha_at(0, 1) == 1.0
    with pytest.raises(ValueError):
        L.alpha_at(0, 10, start=0.6, end=0.5)


# ----------------------------------------------------------------------------- micro-batch invariance
SPLITS = [(0, 2), (2, 3), (3, 6)]


def _run(loss_fn, params, splits, **glob):
    """Backward each slice's loss into fresh leaves; return (sum of losses, accumulated grad)."""
    leaf = params.clone().requires_grad_(True)
    total = 0.0
    for lo, hi in splits:
        loss = loss_fn(leaf, lo, hi, glob)
        loss.backward()
        total += float(loss.detach())
    return total, leaf.grad


@pytest.mark.parametrize("kind", ["pg", "kl_ref", "opd_full", "opd_topk", "turnopd"])
def test_microbatch_sum_equals_full_batch(kind):
    d = rand_batch(12)
    mask, turn, ids = d["mask"], d["turn"], d["ids"]
    adv = L.grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], dtype=F64), torch.tensor([0, 0, 0, 1, 1, 1]))
    weights = L.turn_weights(turn, mask, 0.4, dtype=F64)
    n_tok, n_ep = int(mask.sum()), int(mask.bool().any(1).sum())

    def loss_fn(logits, lo, hi, glob):
        m, lg = mask[lo:hi], logits[lo:hi]
        if kind == "pg":
            return L.policy_gradient_loss(logp_of(lg, ids[lo:hi]), d["old"][lo:hi], adv[lo:hi], m,
                                          total_agent_tokens=glob.get("tokens"))
        if kind == "kl_ref":
            return L.kl_to_reference_loss(logp_of(lg, ids[lo:hi]), d["ref"][lo:hi], m, "k3",
                                          total_agent_tokens=glob.get("tokens"))
        if kind == "opd_full":
            return L.masked_token_mean(L.reverse_kl_full(lg, d["teacher"][lo:hi], m), m, glob.get("tokens"))
        if kind == "opd_topk":
            return L.masked_token_mean(L.reverse_kl_topk(lg, m, 3, teacher_logits=d["teacher"][lo:hi]), m,
                                       glob.get("tokens"))
        per = L.reverse_kl_topk(lg, m, 3, teacher_logits=d["teacher"][lo:hi])
        return L.weighted_episode_mean(per, weights[lo:hi], glob.get("episodes"))

    full_loss, full_grad = _run(loss_fn, d["student"], [(0, 6)])
    micro_loss, micro_grad = _run(loss_fn, d["student"], SPLITS, tokens=n_tok, episodes=n_ep)
    assert abs(full_loss - micro_loss) < 1e-12
    assert torch.allclose(full_grad, micro_grad, atol=1e-14)
    # local normalisation would not be invariant: the test can tell the difference
    local_loss, local_grad = _run(loss_fn, d["student"], SPLITS)
    assert abs(full_loss - local_loss) > 1e-6 or not torch.allclose(full_grad, local_grad)


def test_turnopd_at_alpha_zero_is_exactly_vanilla_opd_and_blends_linearly():
    """The blend ablation changes one thing: at alpha = 0 TurnOPD's loss *is* OPD's (bit for bit),
    at alpha = 1 it is the episode-then-turn mean, and in between the straight line; summed over
    micro-batches with the batch's counts it equals the full-batch loss."""
    d = rand_batch(21)
    mask, turn = d["mask"], d["turn"]
    per = L.reverse_kl_topk(d["student"], mask, 3, teacher_logits=d["teacher"])
    n_tok, n_eps = int(mask.sum()), int((mask.sum(1) > 0).sum())
    opd = L.masked_token_mean(per, mask, n_tok)
    assert torch.equal(L.turnopd_loss(per, turn, mask, 0.0, n_tok, n_eps), opd)
    turn_level = L.weighted_episode_mean(per, L.turn_weights(turn, mask, 1.0, F64), n_eps)
    assert torch.allclose(L.turnopd_loss(per, turn, mask, 1.0, n_tok, n_eps), turn_level, atol=1e-14)
    mid = L.turnopd_loss(per, turn, mask, 0.3, n_tok, n_eps)
    assert torch.allclose(mid, 0.7 * opd + 0.3 * turn_level, atol=1e-14) and not torch.allclose(opd, turn_level)
    parts = sum(L.turnopd_loss(per[lo:lo + 2], turn[lo:lo + 2], mask[lo:lo + 2], 0.3, n_tok, n_eps)
                for lo in range(0, mask.shape[0], 2))
    assert torch.allclose(parts, mid, atol=1e-12)


@pytest.mark.parametrize("kind", ["full", "tail", "renormalized", "union-tail"])
def test_a_student_equal_to_its_teacher_gets_exactly_zero_gradient(kind):
    """Self-distillation must be a no-op: float noise in the gradient (the analytically-zero
    d log p part) would be scaled by Adam into learning-rate-sized steps."""
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, 50, generator=g) * 3           # float32, as in training
    s = logits.clone().requires_grad_(True)
    mask = torch.ones(3, 4)
    if kind == "full":
        kl = L.reverse_kl_full(s, logits.clone(), mask)
    else:
        est = "tail" if kind != "renormalized" else "renormalized"
        kl = L.reverse_kl_topk(s, mask, 5, teacher_logits=logits.clone(), estimator=est,
                               support="union" if kind == "union-tail" else "teacher")
    kl.sum().backward()
    assert float(kl.detach().abs().max()) == 0.0 and float(s.grad.abs().max()) == 0.0
