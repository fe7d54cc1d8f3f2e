"""Byte-level BPE tokenizer trained per corpus, and the agent-turn loss mask.

Why this exists: the paper trains a 3000-token BPE on each corpus. Byte-level BPE with no
normaliser and no added prefix space makes ``decode(encode(text)) == text`` hold for every string,
which the rollout engine relies on when it re-tokenises environment observations. The four role
markers of `planning_gym.text` are added special tokens: each is one id and is never split, and
the saved folder loads with ``transformers.AutoTokenizer.from_pretrained``.

Agent mask convention (`agent_mask`): a token is an *agent token* when the model must produce it
during a rollout. That is every token after an ``<|agent|>`` marker up to **and including** the
``<|env|>`` or ``<|eos|>`` that closes the turn, because emitting that closing marker is how the
policy ends its turn. The ``<|agent|>`` marker itself is 0 (the environment side appends it), as
are observations, ``<|pad|>`` and the ``<|eos|>`` that follows a final observation.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from planning_gym.text import AGENT, ENV, EOS, PAD, SPECIAL_TOKENS


class SpecialIds(NamedTuple):
    pad: int
    eos: int
    env: int
    agent: int


def train_tokenizer(texts: Iterable[str], vocab_size: int = 3000):
    """Train a byte-level BPE on ``texts``; return a `PreTrainedTokenizerFast`.

    Special tokens get ids 0..3 in `SPECIAL_TOKENS` order (PAD, EOS, ENV, AGENT). The vocabulary
    may end up smaller than ``vocab_size`` on a small corpus (BPE stops when no pair is left).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap(tok)


# A chat template that writes a conversation exactly as the corpus rows and the rollout engine do
# (`planning_gym.text`): environment messages ("environment", or "user") after <|env|>, agent
# messages ("agent", or "assistant") after <|agent|>; the generation prompt opens an agent turn.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] in ['environment', 'user', 'system'] %}" + ENV + "{{ m['content'] }}"
    "{% elif m['role'] in ['agent', 'assistant'] %}" + AGENT + "{{ m['content'] }}"
    "{% else %}{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + AGENT + "{% endif %}"
)


def wrap(tok):
    """Wrap a `tokenizers.Tokenizer` as a transformers fast tokenizer with our special tokens."""
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens={"env_token": ENV, "agent_token": AGENT},   # a dict: transformers 4.x and 5.x
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def save_tokenizer(tokenizer, folder: str | Path) -> Path:
    """Write ``tokenizer.json`` + ``tokenizer_config.json`` (what AutoTokenizer needs).

    In a checkpoint folder ``config.json`` says ``model_type: qwen2``, and transformers 5 then
    forces its ``Qwen2Tokenizer``, which rebuilds the pipeline with an NFC normaliser, Qwen's
    pre-tokeniser regex and an extra ``<|endoftext|>`` token: different ids than ours. An
    ``auto_map`` entry makes AutoTokenizer (without ``trust_remote_code``) take the declared
    ``tokenizer_class`` instead, which loads ``tokenizer.json`` exactly as trained.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "TokenizersBackend"
    config["auto_map"] = {"AutoTokenizer": [None, "TokenizersBackend"]}
    for key in ("is_local", "local_files_only"):  # loader bookkeeping, not tokenizer settings
        config.pop(key, None)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder


def load_tokenizer(folder: str | Path):
    """Load a saved tokenizer exactly as trained (no class dispatch on the model type) and check
    that the role markers are intact."""
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json in {folder}")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    special_ids(tokenizer)  # raises when a marker is missing or not a single token
    return tokenizer


def special_ids(tokenizer) -> SpecialIds:
    """The ids of PAD, EOS, ENV, AGENT; ValueError when one is not a single known token."""
    ids = []
    for token in (PAD, EOS, ENV, AGENT):
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1 or encoded[0] != tokenizer.convert_tokens_to_ids(token):
            raise ValueError(f"tokenizer does not hold {token} as one special token")
        ids.append(encoded[0])
    return SpecialIds(*ids)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` (no BOS/EOS added)."""
    return tokenizer.encode(text, add_special_tokens=False)


def encode_batch(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of many texts at once (parallel in the Rust backend)."""
    return [e.ids for e in tokenizer.backend_tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def decode(tokenizer, ids: Sequence[int]) -> str:
    """Exact inverse of `encode`: special tokens kept, no whitespace clean-up."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def agent_mask(ids: Sequence[int] | np.ndarray, special) -> np.ndarray:
    """1 for tokens the policy must produce (see module docstring), else 0; same length as ids.

    ``special`` is a `SpecialIds` or the tokenizer itself. Works on one document or on a packed
    stream of documents joined by EOS: the state is decided by the most recent role marker (ENV,
    AGENT or EOS) strictly before each position.
    """
    if not isinstance(special, SpecialIds):
        special = special_ids(special)
    arr = np.asarray(ids, dtype=np.int64)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint8)
    is_marker = (arr == special.env) | (arr == special.agent) | (arr == special.eos)
    positions = np.where(is_marker, np.arange(arr.size), -1)
    last_marker = np.maximum.accumulate(positions)                  # most recent marker at or before i
    before = np.concatenate(([-1], last_marker[:-1]))               # ... strictly before i
    in_turn = (before >= 0) & (arr[np.maximum(before, 0)] == special.agent)
    mask = in_turn & (arr != special.agent) & (arr != special.pad)
    return mask.astype(np.uint8)

