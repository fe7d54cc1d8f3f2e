"""Tests of the per-corpus byte-level BPE and the agent-turn mask (pretrain/tokenizer.py).

Why: the rollout engine re-tokenises observations and trusts that text survives a round trip,
that role markers are single ids, that checkpoints load the same tokenizer through AutoTokenizer,
and that the agent mask trains exactly the tokens a policy must emit.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planning_gym.text import AGENT, ENV, EOS, PAD, SPECIAL_TOKENS, split_turns
from pretrain.synthetic import synthetic_rows
from pretrain.tokenizer import (agent_mask, decode, encode, load_tokenizer, save_tokenizer, special_ids,
                                train_tokenizer)

ROWS = synthetic_rows(300, seed=1)
TEXTS = [r["text"] for r in ROWS]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS, vocab_size=3000)


def test_special_tokens_are_single_fixed_ids(tok):
    special = special_ids(tok)
    assert special == (0, 1, 2, 3)
    for token, expected in zip(SPECIAL_TOKENS, special):
        assert encode(tok, token) == [expected]
    ids = encode(tok, f"{ENV}Goal: x{AGENT}Action: gather x{ENV}done{EOS}")
    assert [i for i in ids if i < 4] == [special.env, special.agent, special.env, special.eos]
    # a marker-like string that is not a marker must not become a special id
    assert not set(encode(tok, "<|env| <|agent> |pad|>")) & set(special)
    assert tok.eos_token == EOS and tok.pad_token == PAD


def test_vocab_size_is_the_requested_bound(tok):
    small = train_tokenizer(TEXTS, vocab_size=300)
    assert len(small) == 300  # the corpus supports more merges, so the bound is reached
    assert 300 < len(tok) <= 3000
    assert encode(small, TEXTS[0]) != encode(tok, TEXTS[0])  # fewer merges, other ids


def test_training_is_deterministic(tok):
    again = train_tokenizer(TEXTS, vocab_size=3000)
    assert again.get_vocab() == tok.get_vocab()
    assert encode(again, TEXTS[0]) == encode(tok, TEXTS[0])


def test_corpus_rows_round_trip(tok):
    unseen = [r["text"] for r in synthetic_rows(100, seed=7, split="test_ood", recipe_seed=5)]
    for text in TEXTS + unseen:
        ids = encode(tok, text)
        assert decode(tok, ids) == text
    # BPE learnt something: far fewer tokens than bytes
    assert sum(len(encode(tok, t)) for t in TEXTS) < 0.4 * sum(len(t.encode()) for t in TEXTS)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_round_trips(tok, text):
    assert decode(tok, encode(tok, text)) == text


FRAGMENTS = st.sampled_from([ENV, AGENT, EOS, PAD, " ", "  ", "\n", "\t", "\r\n", "Action: ", "gather",
                             "ash root", "é", "\u0065\u0301", "🎉", "x2", "<|", "|>", "<|env", "ﬁ"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=5)), max_size=30))
def test_marker_heavy_text_round_trips(tok, parts):
    text = "".join(parts)
    assert decode(tok, encode(tok, text)) == text


def test_autotokenizer_loads_run_and_checkpoint_folders(tok, tmp_path):
    from transformers import AutoTokenizer, Qwen2Config

    plain = save_tokenizer(tok, tmp_path / "tokenizer")
    ckpt = save_tokenizer(tok, tmp_path / "ckpt")
    Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1).save_pretrained(ckpt)
    samples = TEXTS[:20] + ["e\u0301 ﬁ 12345  \n\n x", "<|eos|>"]
    for folder in (plain, ckpt):
        auto = AutoTokenizer.from_pretrained(str(folder))
        ours = load_tokenizer(folder)
        assert len(auto) == len(ours) == len(tok), folder  # no extra tokens beyond the model's vocab
        assert special_ids(auto) == special_ids(tok)
        for text in samples:
            assert encode(auto, text) == encode(tok, text) == encode(ours, text)
            assert decode(auto, encode(auto, text)) == text
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    assert config["eos_token"] == EOS and config["pad_token"] == PAD


def _expected_agent_text(text: str) -> str:
    """What the policy emits in a document followed by EOS: each agent turn plus its closer."""
    turns = split_turns(text)
    return "".join(content + (ENV if i + 1 < len(turns) else EOS)
                   for i, (role, content) in enumerate(turns) if role == "agent")


def test_agent_mask_selects_agent_turns_and_their_closing_marker(tok):
    special = special_ids(tok)
    text = f"{ENV}Goal: moon elixir{AGENT}Action: gather ash root{ENV}You gather ash root.{AGENT}Action: brew x"
    ids = encode(tok, text) + [special.eos]
    mask = agent_mask(ids, special)
    assert decode(tok, [i for i, m in zip(ids, mask) if m]) == f"Action: gather ash root{ENV}Action: brew x{EOS}"
    # the AGENT marker and the observations are never targets; an EOS after an observation is not either
    ids2 = encode(tok, f"{ENV}obs{AGENT}Action: a{ENV}final obs") + [special.eos]
    mask2 = agent_mask(ids2, special)
    assert decode(tok, [i for i, m in zip(ids2, mask2) if m]) == f"Action: a{ENV}"
    assert mask2[-1] == 0 and all(m == 0 for i, m in zip(ids2, mask2) if i == special.agent)
    assert np.array_equal(agent_mask(ids2, tok), mask2)  # the tokenizer itself may stand for its ids


def test_agent_mask_on_corpus_rows_and_packed_streams(tok):
    special = special_ids(tok)
    docs = [encode(tok, t) + [special.eos] for t in TEXTS[:50]]
    for text, ids in zip(TEXTS[:50], docs):
        mask = agent_mask(ids, special)
        assert decode(tok, [i for i, m in zip(ids, mask) if m]) == _expected_agent_text(text)
    stream = np.concatenate([np.array(d) for d in docs])
    per_doc = np.concatenate([agent_mask(d, special) for d in docs])
    assert np.array_equal(agent_mask(stream, special), per_doc)  # state resets at every document
    assert 0 < per_doc.mean() < 1
