"""The domain lexicons: valid word pools, and enough distinct words at paper scale for a wide BPE.

The paper trains a 3000-token byte-level BPE per corpus.  A corpus's text is a few fixed
templates plus item names (``modifier noun``) and verbs, so the vocabulary a BPE can reach is
set by how many distinct words the item names use: a fully merged BPE adds roughly 2-3 tokens per
word type.  These tests keep the pools valid and large, and measure both quantities on a
paper-scale world (in seconds: no corpus is generated, every rule is rendered once instead).
"""
from __future__ import annotations

import itertools
import re

import pytest

from planning_gym.config import SCALES, scale_graph
from planning_gym.world import World, known_domains, load_domain

DOMAINS = known_domains()
POOLS = ("base_modifiers", "base_nouns", "crafted_modifiers", "crafted_nouns")
WORD = re.compile(r"[a-z]+")
# Measured with the pools of this commit and names that never reuse a word (seed 0): 740 distinct
# name words per domain at paper scale; the rule text below then trains a BPE of fa 2225, lf 2213,
# ea 2366 tokens, and one over all three domains reaches the 3000 cap.  (With the original 20-word
# pools and reused words: 75 words and ~580 tokens.)
MIN_NAME_WORDS = 700
MIN_VOCAB_ONE_DOMAIN = 2100
PAPER_VOCAB = 3000


def name_words(world: World) -> set[str]:
    return {w for name in world.names for w in name.split()}


def rule_text(world: World) -> list[str]:
    """Corpus-like documents: every rule and every gather once, in the observation/action wording."""
    def inv(pairs) -> str:
        return ", ".join(f"{world.names[i]} x{c}" for i, c in pairs) or "empty"
    docs = []
    for rule in world.rules:
        out = world.names[rule.output]
        docs.append(f"<|env|>Result: new task\nGoal: {out}\nInventory: {inv(rule.inputs)}<|agent|>"
                    f"Reason: {out} takes {inv(rule.inputs)}, so {rule.verb} it\nAction: {rule.verb} {out}"
                    f"<|env|>Result: did {rule.verb} {out}. Goal reached\nGoal: {out}\nInventory: {out} x1")
    for i in range(world.n_items):
        if world.is_base(i):
            docs.append(f"<|agent|>Reason: {world.names[i]} is a base item, so {world.gather_verb} it\n"
                        f"Action: {world.gather_verb} {world.names[i]}<|env|>Result: did "
                        f"{world.gather_verb} {world.names[i]}")
    return docs


@pytest.mark.parametrize("domain", DOMAINS)
def test_pools_are_valid_words(domain):
    spec = load_domain(domain)
    for pool in POOLS:
        words = spec[pool]
        assert isinstance(words, list) and words, pool
        bad = [w for w in words if not (isinstance(w, str) and WORD.fullmatch(w))]
        assert not bad, f"{domain} {pool}: not single lowercase ASCII words: {bad}"
        dups = sorted(w for w in set(words) if words.count(w) > 1)
        assert not dups, f"{domain} {pool}: repeated words {dups}"
    # modifiers and nouns never share a word; base and crafted pools are disjoint too, so a base
    # name can never equal a crafted name and every pool word is a distinct word type.
    for a, b in itertools.combinations(POOLS, 2):
        shared = sorted(set(spec[a]) & set(spec[b]))
        assert not shared, f"{domain}: {a} and {b} share {shared}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_pools_are_large(domain):
    spec = load_domain(domain)
    assert min(len(spec["base_modifiers"]), len(spec["base_nouns"])) >= 150
    assert min(len(spec["crafted_modifiers"]), len(spec["crafted_nouns"])) >= 350


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("scale", SCALES)
def test_worlds_build_at_every_scale(domain, scale):
    spec = load_domain(domain)
    world = World.build(domain, scale_graph(scale), 0)
    assert len(set(world.names)) == world.n_items
    for name, level in zip(world.names, world.levels):
        mod, noun = name.split(" ")
        kind = "base" if level == 0 else "crafted"
        assert mod in spec[f"{kind}_modifiers"] and noun in spec[f"{kind}_nouns"], name


@pytest.mark.parametrize("domain", DOMAINS)
def test_paper_world_uses_many_words(domain):
    world = World.build(domain, scale_graph("paper"), 0)
    assert len(name_words(world)) >= MIN_NAME_WORDS


def test_paper_bpe_vocabulary():
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from pretrain.tokenizer import train_tokenizer

    worlds = [World.build(d, scale_graph("paper"), 0) for d in DOMAINS]
    for world in worlds:
        assert len(train_tokenizer(rule_text(world), PAPER_VOCAB)) >= MIN_VOCAB_ONE_DOMAIN, world.domain
    if len(worlds) >= 3:
        every = [doc for w in worlds for doc in rule_text(w)]
        assert len(train_tokenizer(every, PAPER_VOCAB)) == PAPER_VOCAB
