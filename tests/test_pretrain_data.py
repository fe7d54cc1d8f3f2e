"""Tests of corpus reading and sequence packing (pretrain/data.py).

Why: packing decides which tokens the model learns from. Every document token must be a target
exactly once per pass, documents must be separated by EOS with no padding, the sample order must
be a pure function of (seed, position) so that a resume and any world size see the same batches.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from pretrain.config import UsageError
from pretrain.data import PackedData, check_corpus, load_split, read_texts
from pretrain.synthetic import synthetic_rows, write_synthetic_corpus
from pretrain.tokenizer import agent_mask, encode, special_ids, train_tokenizer

TEXTS = [r["text"] for r in synthetic_rows(120, seed=3)]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS, vocab_size=500)


@pytest.fixture(scope="module")
def packed(tok):
    return PackedData.from_texts(TEXTS, tok, special_ids(tok), block_size=48, seed=5)


def test_stream_is_documents_joined_by_eos(tok, packed):
    special = special_ids(tok)
    expected = [t for text in TEXTS for t in encode(tok, text) + [special.eos]]
    assert packed.stream.tolist() == expected
    assert special.pad not in packed.stream  # no padding anywhere
    assert np.array_equal(packed.mask, agent_mask(expected, special))


def test_blocks_cover_every_target_once(packed):
    T, n = packed.block_size, packed.num_blocks
    assert n == (len(packed.stream) - 1) // T
    x, y, m = packed.blocks(list(range(n)))
    assert x.shape == y.shape == m.shape == (n, T)
    # targets are the next token of the inputs, and blocks tile stream[1 : n*T + 1] exactly once
    assert np.array_equal(y.reshape(-1), packed.stream[1:n * T + 1])
    assert np.array_equal(x.reshape(-1), packed.stream[:n * T])
    assert np.array_equal(m.reshape(-1), packed.mask[1:n * T + 1])


def test_order_is_a_pure_function_of_seed_and_position(tok, packed):
    n = packed.num_blocks
    first_epoch = [packed.block_of(p) for p in range(n)]
    second_epoch = [packed.block_of(p) for p in range(n, 2 * n)]
    assert sorted(first_epoch) == sorted(second_epoch) == list(range(n))
    assert first_epoch != second_epoch and first_epoch != list(range(n))
    other = PackedData.from_texts(TEXTS, tok, special_ids(tok), block_size=48, seed=5)
    assert [other.block_of(p) for p in range(3 * n - 7, 3 * n + 7)] == [packed.block_of(p) for p in range(3 * n - 7, 3 * n + 7)]
    reseeded = PackedData.from_texts(TEXTS, tok, special_ids(tok), block_size=48, seed=6)
    assert [reseeded.block_of(p) for p in range(n)] != first_epoch


@pytest.mark.parametrize("world,micro", [(1, 8), (1, 2), (2, 4), (4, 1)])
def test_shards_partition_the_global_batch(packed, world, micro):
    batch = 8
    accum = batch // (world * micro)
    for step in (0, 3, 57):
        got = [b for a in range(accum) for r in range(world) for b in packed.shard(step, batch, micro, a, r, world)]
        assert got == [packed.block_of(p) for p in packed.step_positions(step, batch)]


def test_target_count_counts_agent_tokens_of_the_global_batch(packed):
    for step in (0, 11):
        blocks = [packed.block_of(p) for p in packed.step_positions(step, 6)]
        _, _, m = packed.blocks(blocks)
        assert packed.target_count(step, 6, "agent") == int(m.sum()) > 0
        assert packed.target_count(step, 6, "all") == 6 * packed.block_size


def test_read_texts_names_the_bad_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"text": "a"}) + "\n\n" + "{not json\n")
    with pytest.raises(UsageError, match=r"x.jsonl:3: not valid JSON"):
        read_texts(path)
    path.write_text(json.dumps({"text": "a"}) + "\n" + json.dumps({"txt": "b"}) + "\n")
    with pytest.raises(UsageError, match=r"x.jsonl:2: row has no string 'text'"):
        read_texts(path)
    path.write_text(json.dumps({"text": "a"}) + "\n" + json.dumps({"text": "b", "id": 1}) + "\n")
    assert read_texts(path) == ["a", "b"]


def test_corpus_checks(tmp_path, tok):
    with pytest.raises(UsageError, match="does not exist"):
        check_corpus(tmp_path / "missing")
    folder = write_synthetic_corpus(tmp_path / "c", n_pretrain=20, n_test=5)
    assert check_corpus(folder) == folder
    (folder / "test_id.jsonl").unlink()
    with pytest.raises(UsageError, match="no test_id.jsonl"):
        check_corpus(folder)
    with pytest.raises(UsageError, match="fewer than one block"):
        load_split(folder, "pretrain.jsonl", tok, special_ids(tok), block_size=10 ** 6, seed=0)
