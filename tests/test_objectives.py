"""The objective registry: loss aggregations by hand, micro-batch exactness, update batches."""
import random

import pytest
import torch

from posttrain.config import make_config
from posttrain.objectives import LOSS_AGGREGATIONS, OBJECTIVES, MicroBatch, aggregate, update_batches

F64 = torch.float64


def test_aggregations_by_hand():
    per = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert float(aggregate(per, mask, "token-mean", 4, 2, 10)) == pytest.approx(10 / 4)          # DAPO
    assert float(aggregate(per, mask, "seq-mean-token-mean", 4, 2, 10)) == pytest.approx((2 + 4) / 2)   # GRPO
    assert float(aggregate(per, mask, "seq-mean-token-sum-norm", 4, 2, 10)) == pytest.approx((6 / 10 + 4 / 10) / 2)
    with pytest.raises(ValueError):
        aggregate(per, mask, "mean", 4, 2, 10)


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_aggregation_summed_over_micro_batches_is_the_full_batch(mode):
    g = torch.Generator().manual_seed(0)
    per = torch.randn(6, 9, generator=g, dtype=F64)
    mask = (torch.rand(6, 9, generator=g) > 0.3).long()
    full = aggregate(per, mask, mode, int(mask.sum()), 6, 50)
    parts = sum(aggregate(per[i:i + 2], mask[i:i + 2], mode, int(mask.sum()), 6, 50) for i in range(0, 6, 2))
    assert torch.allclose(full, parts, atol=1e-12)


def test_update_batches_cover_every_episode_once_per_epoch():
    assert update_batches(8, 1, random.Random(0)) == [list(range(8))]
    parts = update_batches(9, 2, random.Random(0))
    assert len(parts) == 2 and sorted(sum(parts, [])) == list(range(9)) and parts[0] != list(range(5))


def _micro_batch(seed: int, old_shift: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 7, generator=g, dtype=F64)
    targets = torch.randint(0, 7, (3, 5), generator=g)
    mask = torch.ones(3, 5, dtype=torch.long)
    logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    adv = torch.tensor([1.0, -1.0, 0.5], dtype=F64).view(-1, 1).expand(3, 5)
    return MicroBatch(logits.requires_grad_(True), targets, mask, torch.zeros(3, 5, dtype=torch.long),
                      logp.detach() + old_shift, adv, None, None, 15, 3, 0.0)


def test_grpo_loss_is_the_clipped_surrogate_and_the_clip_acts_off_policy():
    cfg = make_config("grpo", "tiny")
    mb = _micro_batch(1)
    loss, _, clipped = OBJECTIVES["grpo"](cfg).loss(mb)
    assert clipped == 0.0                                                  # on-policy: ratio 1
    assert float(loss.detach()) == pytest.approx(-(1.0 - 1.0 + 0.5) / 3)          # ratio 1: -mean advantage
    loss.backward()
    assert mb.logits.grad.abs().sum() > 0
    far = _micro_batch(1, old_shift=-1.0)                                  # ratio e > 1 + clip: clipped
    loss, _, clipped = OBJECTIVES["grpo"](cfg).loss(far)
    assert clipped == 1.0
    loss.backward()
    # positive advantages are clipped (no gradient); the negative one still pushes down
    assert far.logits.grad[0].abs().sum() == 0 and far.logits.grad[1].abs().sum() > 0


def test_entropy_bonus_lowers_the_loss_by_the_entropy():
    plain = make_config("opd", "tiny")
    bonus = make_config("opd", "tiny", entropy_coef=0.1)
    mb = _micro_batch(2)
    mb.teacher_logits = torch.randn(3, 5, 7, dtype=F64)
    a, _, _ = OBJECTIVES["opd"](plain).loss(mb)
    b, _, _ = OBJECTIVES["opd"](bonus).loss(mb)
    from posttrain import losses
    ent = losses.masked_token_mean(losses.token_entropy(mb.logits, mb.mask), mb.mask, 15)
    assert float(a - b) == pytest.approx(0.1 * float(ent))


def test_registry_and_config():
    assert set(OBJECTIVES) == {"grpo", "opd", "turnopd", "tcod"}
    assert OBJECTIVES["opd"].needs_teacher and not OBJECTIVES["grpo"].needs_teacher
    assert make_config("grpo", "tiny").ppo_mini_batches == 2 and make_config("opd", "tiny").ppo_mini_batches == 1
    from pretrain.config import UsageError
    with pytest.raises(UsageError):
        make_config("grpo", "tiny", loss_agg="mean")


@pytest.mark.parametrize("every, start, after, count", [(0, True, [], 1), (5, True, [5, 10], 4),
                                                         (5, False, [5, 10], 3), (6, True, [6], 3), (12, True, [], 2)])
def test_evaluation_schedule(every, start, after, count):
    """What the trainer evaluates after (never the last step: the final evaluation covers it) and the
    count reproduce.estimate charges for."""
    cfg = make_config("opd", "tiny", steps=12, eval_every=every, eval_at_start=start)
    assert [s for s in range(1, 13) if cfg.evaluates_after(s)] == after
    assert cfg.evaluations == count
