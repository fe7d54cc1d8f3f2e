"""Batched multi-turn rollouts with the environment in the loop: what GRPO / OPD / TurnOPD train on.

Why this exists: every post-training method and the evaluation need many episodes of a policy
playing `planning_gym` tasks, with per-token log-probs and turn boundaries. Re-encoding a
growing conversation at every turn costs O(turns^2) model work; this engine keeps each
episode's KV cache across turns (through a `engine.backend.Policy`) and builds every
sequence by concatenating token ids, never re-tokenising earlier text.

An episode, as token ids (the text protocol of `planning_gym.text`):

    ENV obs_0 AGENT turn_1 ENV obs_1 AGENT turn_2 ENV ... obs_n

* The prompt is ``ENV + encode(first observation) + AGENT``.
* A turn is sampled until the model emits ENV or EOS (both kept, sampled, mask 1) or reaches
  ``max_turn_tokens``; then the engine appends ENV itself (not sampled: mask 0).
* The turn's text goes through `parse_action`; the environment is stepped with the action or,
  when there is none, with the raw text (an invalid turn: an ``Error:`` observation, and the turn
  counts toward the step limit). A broken generation never raises.
* ``encode(observation) + AGENT`` is appended and the next turn starts from the cache.
* An episode ends on success (the final observation is appended, without AGENT), the step
  limit (``step_limit``, 20 as at evaluation), the per-call turn cap ``max_turns`` (TurnOPD's
  depth cap), EOS (the turn is still executed; nothing is appended after EOS), or the token
  budget ``max_total_tokens`` (a turn cut by the budget is not executed; the final observation
  is appended only where it fits).

Up to ``batch_size`` episodes are in flight; each ended one is replaced by the next task at
once, and turns end independently (continuous batching, see `engine.backend`).

Records (aligned with ``ids``: entry t describes token t given tokens < t):
``logprobs`` = log-softmax of the raw logits (temperature 1), ``sample_logprobs`` = log-prob
under the sampling distribution (temperature, top-p), both 0.0 on tokens the policy did not
produce; ``mask`` = 1 on tokens the policy produced (sampled, or forced by a ``script``),
including the ENV / EOS that closes a turn; ``turn`` = the 0-based turn of those tokens and -1
elsewhere. `Rollout.batch` pads all of it into ``[B, T]`` tensors for the trainers; the matching
teacher-forced values are ``log_softmax(logits[:, :-1]).gather(ids[:, 1:])`` with a 0 prepended.

``script(episode, turn, observation)`` may force a turn (a ``str`` is the whole turn: its ids
plus ENV are teacher-forced and scored by the model) or a prefix (a list of ids, after which
sampling continues). Tests use it to drive a random model through multi-turn episodes.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from planning_gym.env import EVAL_STEP_LIMIT, PlanningEnv, Task
from planning_gym.text import parse_action
from planning_gym.world import World
from engine.backend import HFPolicy, Policy, SamplingParams, make_policy
from pretrain.tokenizer import decode, encode_batch, special_ids

__all__ = ["Episode", "HFPolicy", "Rollout", "make_policy", "RolloutConfig", "STOP_REASONS", "rollout"]
STOP_REASONS = ("success", "step_limit", "turn_cap", "eos", "max_total_tokens")
Script = Callable[[int, int, str], "str | list[int] | None"]


@dataclass
class RolloutConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_turn_tokens: int = 192          # longest corpus turn at tiny scale: ~110 tokens
    step_limit: int = EVAL_STEP_LIMIT
    max_total_tokens: int = 4096
    batch_size: int = 64                # episodes in flight at once (rows of the KV cache)

    def __post_init__(self):
        SamplingParams(self.temperature, self.top_p)
        if min(self.max_turn_tokens, self.step_limit, self.max_total_tokens, self.batch_size) < 1:
            raise ValueError("max_turn_tokens, step_limit, max_total_tokens and batch_size must be positive")


@dataclass
class Episode:
    index: int
    domain: str
    goal: str
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    sample_logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turn: list[int] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)            # decoded agent turns (without the closing marker)
    actions: list[str | None] = field(default_factory=list)   # parsed action of each turn, None if absent
    valid: list[bool] = field(default_factory=list)           # did the environment accept the turn
    success: bool = False
    stop_reason: str = ""
    text: str = ""

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    @property
    def n_invalid(self) -> int:
        return sum(not v for v in self.valid)

    @property
    def reward(self) -> float:
        return 1.0 if self.success else 0.0

    def _extend(self, ids, logprobs=None, sample_logprobs=None, turn: int = -1) -> None:
        n = len(ids)
        self.ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * n
        self.sample_logprobs += sample_logprobs if sample_logprobs is not None else [0.0] * n
        self.mask += [1 if turn >= 0 else 0] * n
        self.turn += [turn] * n

    def summary(self) -> dict:
        return {"index": self.index, "domain": self.domain, "goal": self.goal, "success": self.success,
                "n_turns": self.n_turns, "n_invalid": self.n_invalid, "actions": self.actions,
                "stop_reason": self.stop_reason, "tokens": len(self.ids), "text": self.text}


@dataclass
class Rollout:
    episodes: list[Episode]
    seconds: float = 0.0

    @property
    def generated_tokens(self) -> int:
        return sum(sum(e.mask) for e in self.episodes)

    def batch(self, pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Right-padded tensors ``[B, T]`` (plus per-episode ``[B]`` vectors) for the trainers."""
        n, length = len(self.episodes), max((len(e.ids) for e in self.episodes), default=0)

        def pad(key, value, dtype):
            out = torch.full((n, length), value, dtype=dtype)
            for i, e in enumerate(self.episodes):
                out[i, :len(e.ids)] = torch.tensor(getattr(e, key), dtype=dtype)
            return out.to(device)

        out = {"input_ids": pad("ids", pad_id, torch.long), "logprobs": pad("logprobs", 0.0, torch.float32),
               "sample_logprobs": pad("sample_logprobs", 0.0, torch.float32),
               "agent_mask": pad("mask", 0, torch.long), "turn_index": pad("turn", -1, torch.long)}
        out["attention_mask"] = torch.zeros((n, length), dtype=torch.long)
        for i, e in enumerate(self.episodes):
            out["attention_mask"][i, :len(e.ids)] = 1
        out["attention_mask"] = out["attention_mask"].to(device)
        for key, dtype in (("success", torch.bool), ("n_turns", torch.long), ("n_invalid", torch.long),
                           ("reward", torch.float32)):
            out[key] = torch.tensor([getattr(e, key) for e in self.episodes], dtype=dtype, device=device)
        return out


def next_token_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Teacher-forced next-token logits ``[B, T-1, V]`` of a batch (`Rollout.batch`'s layout).

    A right-padded batch is scored without its attention mask: under causal attention a real
    token never sees the pads after it, and positions count from 0 either way, so every real
    position gets the logits of its unpadded episode. Without a mask, SDPA takes its causal
    kernel instead of a masked one over ``[B, 1, T, T]``: the trainers' forward and backward on
    CPU run faster (`make bench-update`). Pad positions then hold finite values of no meaning,
    which every loss masks out. A batch padded any other way keeps its mask.
    """
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    return model(input_ids=input_ids, attention_mask=None if right_padded else attention_mask).logits[:, :-1]


def rollout(policy: Policy, tokenizer, tasks: Sequence[tuple[World, Task]], config: RolloutConfig | None = None, *,
            seed: int | None = None, generator: torch.Generator | None = None,
            max_turns: int | Sequence[int | None] | None = None, script: Script | None = None,
            progress: Callable[[int], None] | None = None) -> Rollout:
    """Play every ``(world, task)`` once with ``policy``; see the module docstring.

    ``max_turns`` caps the turns of each episode (one int for all, or one per episode).
    ``seed`` makes sampling reproducible (ignored when a ``generator`` is given).
    ``progress(n)`` is called with the number of episodes that just finished.
    """
    cfg = config or RolloutConfig()
    special = special_ids(tokenizer)
    params = SamplingParams(cfg.temperature, cfg.top_p)
    if generator is None and seed is not None:
        generator = torch.Generator(device=policy.device).manual_seed(seed)
    caps = list(max_turns) if isinstance(max_turns, Sequence) else [max_turns] * len(tasks)
    if len(caps) != len(tasks) or any(c is not None and c < 1 for c in caps):
        raise ValueError("max_turns must be positive, one value or one per task")
    # ENV closes a turn; EOS ends the episode; an AGENT marker the policy writes inside a turn
    # also closes it (it is the policy's token, trained on; an ENV is added after it, as after a cut)
    stop_ids = (special.env, special.eos, special.agent)
    start = time.perf_counter()
    policy.reset()
    episodes: list[Episode] = []
    envs: list[PlanningEnv] = []
    prompts = []
    for i, (world, task) in enumerate(tasks):
        env = PlanningEnv(world, max_steps=cfg.step_limit)
        obs, _ = env.reset(options={"task": task})
        envs.append(env)
        episodes.append(Episode(i, world.domain, world.names[task.goal], observations=[obs]))
        prompts.append(obs)
    for e, ids in zip(episodes, encode_batch(tokenizer, prompts)):
        e._extend([special.env] + ids + [special.agent])
        if len(e.ids) >= cfg.max_total_tokens:
            raise ValueError(f"max_total_tokens={cfg.max_total_tokens} leaves no room after the first observation")

    def budget(i: int) -> int:
        return min(cfg.max_turn_tokens, cfg.max_total_tokens - len(episodes[i].ids))

    def open_turns(rows: list[int]) -> None:
        prefixes = None
        if script is not None:
            prefixes = []
            for i in rows:
                forced = script(i, episodes[i].n_turns, episodes[i].observations[-1])
                if isinstance(forced, str):
                    forced = encode_batch(tokenizer, [forced])[0] + [special.env]
                prefixes.append(forced)
        policy.begin(rows, [budget(i) for i in rows], prefixes)

    queue, n_live = deque(range(len(tasks))), 0
    while queue or n_live:
        joining = [queue.popleft() for _ in range(min(len(queue), cfg.batch_size - n_live))]
        if joining:
            policy.add(joining, [episodes[i].ids for i in joining])
            open_turns(joining)
            n_live += len(joining)
        ended = policy.advance(stop_ids, params, generator)
        if not ended:
            raise RuntimeError("the policy returned no finished turn while turns were open")
        finished, stepped = [], []
        live_rows = list(ended)
        texts = [decode(tokenizer, t.ids[:-1] if t.stopped else t.ids) for t in ended.values()]
        for i, text in zip(live_rows, texts):
            t, e, env = ended[i], episodes[i], envs[i]
            closed = t.ids[-1] if t.stopped else None
            e._extend(t.ids, t.logprobs, t.sample_logprobs, turn=e.n_turns)
            needs_env = closed not in (special.env, special.eos)      # cut by the budget, or closed by AGENT
            if needs_env and len(e.ids) >= cfg.max_total_tokens:     # no room left for the ENV marker
                e.stop_reason = "max_total_tokens"
                finished.append(i)
                continue
            if needs_env:
                e._extend([special.env])
            action = parse_action(text)
            obs, _, terminated, truncated, info = env.step(action if action is not None else text)
            e.turns.append(text)
            e.actions.append(action)
            e.valid.append(bool(info["valid"]))
            e.observations.append(obs)
            e.success = bool(terminated)
            if closed == special.eos:
                e.stop_reason = "success" if terminated else "eos"
            elif terminated:
                e.stop_reason = "success"
            elif truncated:
                e.stop_reason = "step_limit"
            elif caps[i] is not None and e.n_turns >= caps[i]:
                e.stop_reason = "turn_cap"
            stepped.append((i, obs, needs_env))
        cont, chunks = [], []
        for (i, obs, cut), ids in zip(stepped, encode_batch(tokenizer, [o for _, o, _ in stepped])):
            e = episodes[i]
            if e.stop_reason:
                # the final observation, no AGENT; after an EOS the episode's text has ended
                if e.ids[-1] != special.eos and len(e.ids) + len(ids) <= cfg.max_total_tokens:
                    e._extend(ids)
                finished.append(i)
            elif len(e.ids) + len(ids) + 2 > cfg.max_total_tokens:    # no room for AGENT + one token
                e.stop_reason = "max_total_tokens"
                finished.append(i)
            else:
                e._extend(ids + [special.agent])
                cont.append(i)
                chunks.append(([special.env] if cut else []) + ids + [special.agent])
        policy.release(finished)
        policy.append(cont, chunks)
        if cont:
            open_turns(cont)
        n_live -= len(finished)
        if progress is not None and finished:
            progress(len(finished))
    for e in episodes:
        e.text = decode(tokenizer, e.ids)
    return Rollout(episodes, time.perf_counter() - start)
