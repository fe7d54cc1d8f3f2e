"""The text protocol shared by the gym, the tokenizer, the trainer and the rollout engine.

A trajectory is one string in which role markers separate the turns:

    <|env|>{observation 0}<|agent|>{agent turn 1}<|env|>{observation 1}<|agent|>...<|env|>{final observation}

* Observations come from the environment, agent turns from the policy.  A turn's text never
  contains a role marker and carries no trailing newline: the next marker ends it.
* An agent turn is zero or more chain-of-thought lines followed by exactly one action line
  ``Action: <verb> <item>``.  `parse_action` extracts it.
* The corpus ``text`` field holds this string without an end-of-sequence marker; packers append
  ``EOS`` after each document.

The rollout engine generates an agent turn until the model emits ``ENV`` (or ``EOS``), parses
the action, steps the environment and appends ``ENV + observation + AGENT`` as token ids.
"""
from __future__ import annotations

PAD = "<|pad|>"
EOS = "<|eos|>"
ENV = "<|env|>"
AGENT = "<|agent|>"
SPECIAL_TOKENS = (PAD, EOS, ENV, AGENT)

ACTION_PREFIX = "Action:"


def parse_action(agent_turn: str) -> str | None:
    """Return the action of an agent turn (text after the last ``Action:``), or None.

    Only the last action line counts; anything after it on later lines is ignored so that a
    model that keeps writing after its action is judged on the action it committed to.
    """
    action = None
    for line in agent_turn.split("\n"):
        stripped = line.strip()
        if stripped.startswith(ACTION_PREFIX):
            action = stripped[len(ACTION_PREFIX):].strip()
    return action


def join_turns(observations: list[str], agent_turns: list[str]) -> str:
    """Interleave observations and agent turns into one trajectory string.

    ``observations`` has one more element than ``agent_turns`` when the episode ended after an
    environment reply (the usual case), or the same number when it was cut after an agent turn.
    """
    if not (len(observations) - 1 <= len(agent_turns) <= len(observations)):
        raise ValueError("observations and agent turns do not interleave")
    parts = []
    for i, obs in enumerate(observations):
        parts.append(ENV + obs)
        if i < len(agent_turns):
            parts.append(AGENT + agent_turns[i])
    return "".join(parts)


def split_turns(text: str) -> list[tuple[str, str]]:
    """Split a trajectory string into ``[(role, content), ...]`` with role ``env`` or ``agent``."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        if text.startswith(ENV, i):
            role, i = "env", i + len(ENV)
        elif text.startswith(AGENT, i):
            role, i = "agent", i + len(AGENT)
        else:
            raise ValueError(f"trajectory text must start each turn with a role marker (at char {i})")
        nxt = [j for j in (text.find(ENV, i), text.find(AGENT, i)) if j >= 0]
        end = min(nxt) if nxt else len(text)
        out.append((role, text[i:end]))
        i = end
    return out
