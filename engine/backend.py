"""Policy backends for the rollout engine: "extend many token sequences, keeping a KV cache".

Why this exists: the rollout engine (`engine.rollout`) owns the environment loop, the
episode bookkeeping and the records the trainers consume; a backend owns only the model side.
Splitting them at this seam lets a vLLM backend (prefix caching, paged attention, GPU scale)
replace `HFPolicy` without any change to the engine or to the GRPO / OPD / TurnOPD trainers.

The protocol (`Policy`) works on *rows* named by integer ids chosen by the caller:

* ``reset()``                         forget every row;
* ``add(rows, prompts)``              start rows from prompt token ids;
* ``append(rows, chunks)``            extend rows with tokens the policy did not sample
                                      (environment observations and role markers);
* ``begin(rows, budgets, prefixes)``  open a turn on each row: at most ``budget`` tokens, the
                                      first ones optionally forced (``prefix``), scored anyway;
* ``advance(stop_ids, params, gen)``  generate on the open turns until at least one ends (a stop
                                      id or its budget); return ``{row: Turn}`` for those;
* ``release(rows)``                   the rows are finished; their memory may be reused.

So turns end independently: the engine steps a row's environment as soon as its turn ends and
reopens it, while other rows keep generating (continuous batching). A vLLM backend maps
``begin`` to a request over the row's token ids (prefix caching keeps the history) and
``advance`` to engine steps. Tokens are never re-encoded: every id is fed once, in order.

`HFPolicy` (any `transformers` causal LM; tested with Qwen2) keeps one KV buffer
``[rows, kv_heads, capacity, head_dim]`` per layer, *ragged*: row b holds its own n_b real
tokens in slots 0..n_b-1 and nothing else, so slot index == position id and no padding ever
stays in the cache. Two kinds of forward pass, each with an explicit 4-D additive mask
(``key slot <= query slot`` of that row) and explicit ``position_ids``:

* decode: every buffer row feeds one token at its own slot n_b (rows with no open turn feed a
  dummy that the next real write overwrites), ``logits_to_keep=1``;
* prefill: only the rows holding several pending tokens (a prompt, or ENV + observation +
  AGENT) feed them, right-padded to a common width; padding lands beyond each row's end and
  is overwritten later. Prefill waits until ``prefill_fraction`` of the open rows need it (or
  nothing else can run), trading a little idle time for fewer forward passes.

A finished row's buffer row is reused by the next row to join; when an eighth of the buffer
rows are free and nobody takes them, they are dropped (decode passes read every buffer row).

Numerically, each row's cache is therefore that of its sequence alone; the test suite checks
the recorded log-probs against one teacher-forced pass over the final sequences.

Sampling (`sample_tokens`): ``logprob`` is the log-softmax of the raw logits at temperature 1
(what trainers and a teacher-forced pass compute); ``sample_logprob`` is the log-probability
under the distribution actually sampled from (temperature, then top-p). Temperature 0 is greedy.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

try:  # transformers >= 5 accepts per-row positions in `logits_to_keep`
    from transformers.modeling_utils import slice_logits_to_keep as _slice  # noqa: F401
    _PER_ROW_KEEP = True
except ImportError:
    _PER_ROW_KEEP = False


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")


@dataclass
class Turn:
    """Tokens one turn appended to a row, with their log-probabilities."""
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)          # raw logits, temperature 1
    sample_logprobs: list[float] = field(default_factory=list)   # the sampling distribution
    n_forced: int = 0                                            # leading tokens taken from a prefix
    stopped: bool = False                                        # ended on a stop id (not the budget)


class Policy(Protocol):
    device: torch.device

    def reset(self) -> None: ...

    def add(self, rows: Sequence[int], prompts: Sequence[Sequence[int]]) -> None: ...

    def append(self, rows: Sequence[int], chunks: Sequence[Sequence[int]]) -> None: ...

    def begin(self, rows: Sequence[int], budgets: Sequence[int],
              prefixes: Sequence[Sequence[int] | None] | None = None) -> None: ...

    def advance(self, stop_ids: Sequence[int], params: SamplingParams,
                generator: torch.Generator | None = None) -> dict[int, Turn]: ...

    def release(self, rows: Sequence[int]) -> None: ...


def sample_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
                  forced: torch.Tensor | None = None):
    """(tokens, logprob at T=1, logprob under the sampling distribution) for ``logits [n, V]``.

    ``forced`` (``[n]``, -1 where free) overrides the draw; its tokens are scored the same way.
    """
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logq = torch.full_like(logp, float("-inf")).scatter_(1, tokens[:, None], 0.0)
    else:
        scaled = logits / params.temperature
        if params.top_p < 1:
            sorted_logits, order = scaled.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            drop = probs.cumsum(dim=-1) - probs > params.top_p   # keeps the smallest set reaching top_p
            scaled = scaled.scatter(1, order, sorted_logits.masked_fill(drop, float("-inf")))
        logq = torch.log_softmax(scaled, dim=-1)
        # inverse-CDF draw (10x faster than torch.multinomial on CPU); zero-probability tokens
        # have a flat CDF step and can never be chosen
        cdf = logq.exp().cumsum(dim=-1)
        u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
        tokens = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)
    if forced is not None:
        tokens = torch.where(forced >= 0, forced, tokens)
    pick = tokens[:, None]
    return tokens, logp.gather(1, pick).squeeze(1), logq.gather(1, pick).squeeze(1)


def grown_shape(have_rows: int, have_len: int, rows: int, length: int) -> tuple[int, int] | None:
    """A KV buffer's new (rows, slots) to hold ``rows`` x ``length``, or None when it already does:
    rows grow to what is asked, slots at least double (64 at first) so growth is amortised."""
    if rows <= have_rows and length <= have_len:
        return None
    return max(rows, have_rows), (max(length, 2 * have_len, 64) if length > have_len else have_len)


def check_prompts(existing, rows, prompts) -> None:
    """``add``'s contract for every backend: new row ids, each with at least one prompt token."""
    for r, p in zip(rows, prompts, strict=True):
        if r in existing:
            raise ValueError(f"row {r} already exists")
        if not p:
            raise ValueError("a prompt needs at least one token")


class _RaggedCache:
    """Per-layer KV buffers with per-row fill levels; quacks like a transformers cache.

    Before each forward the policy sets ``rows`` (buffer rows fed, or None for all),
    ``offset`` (their write slot) and ``kv_len`` (key slots the attention reads)."""

    is_compileable = False

    def __init__(self, n_layers: int, heads: int, dim: int, dtype, device):
        self.n_layers, self.heads, self.dim, self.dtype, self.device = n_layers, heads, dim, dtype, device
        self.k = [torch.zeros(0, heads, 0, dim, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [t.clone() for t in self.k]
        self.rows = self.offset = None
        self.kv_len = 0

    @property
    def shape(self) -> tuple[int, int]:
        return self.k[0].shape[0], self.k[0].shape[2]

    def reserve(self, rows: int, length: int) -> None:
        """Grow (by doubling) to at least ``rows`` x ``length`` slots, keeping the contents."""
        have_rows, have_len = self.shape
        grown = grown_shape(have_rows, have_len, rows, length)
        if grown is None:
            return
        new_rows, new_len = grown
        for store in (self.k, self.v):
            for i, old in enumerate(store):
                buf = old.new_zeros(new_rows, self.heads, new_len, self.dim)
                buf[:have_rows, :, :have_len] = old
                store[i] = buf

    def keep_rows(self, index: torch.Tensor) -> None:
        for store in (self.k, self.v):
            for i, old in enumerate(store):
                store[i] = old.index_select(0, index)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        n, _, width, _ = key_states.shape
        rows = torch.arange(n, device=self.device) if self.rows is None else self.rows
        slots = self.offset[:, None] + torch.arange(width, device=self.device)[None]
        heads = torch.arange(self.heads, device=self.device)
        index = (rows[:, None, None], heads[None, :, None], slots[:, None, :])
        k, v = self.k[layer_idx], self.v[layer_idx]
        k[index] = key_states
        v[index] = value_states
        if self.rows is None:
            return k[:, :, :self.kv_len], v[:, :, :self.kv_len]
        return k[:, :, :self.kv_len].index_select(0, self.rows), v[:, :, :self.kv_len].index_select(0, self.rows)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.kv_len


@dataclass
class _Row:
    slot: int
    pending: list[int]
    filled: int = 0                          # tokens in the cache (next position id)
    turn: Turn | None = None                 # open turn
    budget: int = 0
    prefix: list[int] = field(default_factory=list)


class HFPolicy:
    """`Policy` over a transformers causal LM with one ragged KV cache (see module doc)."""

    def __init__(self, model, pad_id: int = 0, prefill_fraction: float = 0.125):
        self.model = model
        self.pad_id, self.prefill_fraction = pad_id, prefill_fraction
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        cfg = model.config.get_text_config()
        self._shape = (cfg.num_hidden_layers, cfg.num_key_value_heads,
                       getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.forwards = {"decode": 0, "prefill": 0}
        self.reset()

    # ----- rows ----------------------------------------------------------------------------------
    cache_class = _RaggedCache                 # the KV layout its forward pass reads and writes

    def reset(self) -> None:
        layers, heads, dim = self._shape
        self.cache = self.cache_class(layers, heads, dim, self.dtype, self.device)
        self.rows: dict[int, _Row] = {}
        self.slot_owner: list[int | None] = []

    def add(self, rows, prompts) -> None:
        check_prompts(self.rows, rows, prompts)
        for r, p in zip(rows, prompts):
            free = [b for b, owner in enumerate(self.slot_owner) if owner is None]
            if free:
                slot = free[0]
                self.slot_owner[slot] = r
            else:
                slot = len(self.slot_owner)
                self.slot_owner.append(r)
            self.rows[r] = _Row(slot, list(p))

    def append(self, rows, chunks) -> None:
        for r, c in zip(rows, chunks, strict=True):
            self.rows[r].pending.extend(c)

    def begin(self, rows, budgets, prefixes=None) -> None:
        for r, budget, prefix in zip(rows, budgets, prefixes or [None] * len(rows), strict=True):
            row = self.rows[r]
            if row.turn is not None:
                raise ValueError(f"row {r} already has an open turn")
            if budget < 1 or not row.pending:
                raise ValueError(f"row {r}: a turn needs a positive budget and something to condition on")
            row.turn, row.budget, row.prefix = Turn(), budget, list(prefix or [])

    def release(self, rows) -> None:
        for r in rows:
            row = self.rows.pop(r, None)
            if row is not None:
                self.slot_owner[row.slot] = None

    def _compact(self) -> None:
        """Drop free buffer rows once an eighth are free (episodes ended and none took their place):
        decode passes run over every buffer row, so free rows cost attention reads until dropped."""
        free = self.slot_owner.count(None)
        if not free or free < len(self.slot_owner) / 8:
            return
        live = [b for b, owner in enumerate(self.slot_owner) if owner is not None]
        self.cache.reserve(len(self.slot_owner), 0)
        self.cache.keep_rows(torch.tensor(live, dtype=torch.long, device=self.device))
        self.slot_owner = [self.slot_owner[b] for b in live]
        for b, owner in enumerate(self.slot_owner):
            self.rows[owner].slot = b

    @property
    def cache_shape(self) -> tuple[int, int]:
        """(buffer rows, slots per row): for tests and benchmarks."""
        return self.cache.shape

    # ----- model ---------------------------------------------------------------------------------
    def _run(self, ids, pos, rows, offset, width: int, keep, live=None) -> torch.Tensor:
        """Feed ``ids [n, W]`` at ``pos`` into buffer ``rows`` (None: all) from slot ``offset``;
        logits ``[n, 1, V]`` of the last position (``keep=1``) or of ``keep [n, 1]`` per row.
        ``live``: the fed rows whose logits will be read (None: all); a backend may skip the others."""
        if not isinstance(keep, int) and not _PER_ROW_KEEP:
            # older transformers: project every position, then pick each row's own one
            logits = self._run(ids, pos, rows, offset, width, 0)
            return logits.gather(1, keep[:, :, None].expand(-1, 1, logits.shape[-1]))
        n_rows = ids.shape[0]
        kv_len = int(offset.max()) + width
        self.cache.reserve(len(self.slot_owner), kv_len)
        self.cache.rows, self.cache.offset, self.cache.kv_len = rows, offset, kv_len
        query = offset[:, None] + torch.arange(width, device=self.device)[None]            # [n, W]
        allowed = torch.arange(kv_len, device=self.device)[None, None, :] <= query[:, :, None]
        mask = torch.zeros((n_rows, 1, width, kv_len), dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed[:, None], torch.finfo(self.dtype).min)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                         logits_to_keep=keep, **{self._cache_kw: self.cache})
        return out.logits

    def _decode(self):
        """One token for every buffer row: (rows whose open turn consumed it, their logits)."""
        n = len(self.slot_owner)
        ids = torch.full((n,), self.pad_id, dtype=torch.long)
        offset = torch.zeros(n, dtype=torch.long)
        active = []
        for r, row in self.rows.items():
            offset[row.slot] = row.filled
            if row.turn is not None and len(row.pending) == 1:
                ids[row.slot] = row.pending[0]
                active.append(r)
        offset = offset.to(self.device)
        live = [self.rows[r].slot for r in active]
        logits = self._run(ids[:, None].to(self.device), offset[:, None], None, offset, 1, 1, live)[:, -1]
        for r in active:
            self.rows[r].filled += 1
            self.rows[r].pending = []
        self.forwards["decode"] += 1
        return active, logits.index_select(0, torch.tensor(live, dtype=torch.long, device=self.device))

    max_positions: int | None = None     # set by a backend whose positions are a fixed table (lean)

    def prefill_groups(self, rows: list[int]) -> list[list[int]]:
        """Rows prefilled together share one padded width, so a row far into its episode plus
        another row's long chunk can reach past ``max_positions`` although neither row does: split
        such a batch (rows by fill level, greedily) so that each group's largest offset plus its
        width fits. Without a position limit, one group."""
        if self.max_positions is None:
            return [rows]
        groups: list[list[int]] = []
        for r in sorted(rows, key=lambda r: -self.rows[r].filled):
            need = len(self.rows[r].pending)
            if groups and self.rows[groups[-1][0]].filled + max(need, *(len(self.rows[g].pending)
                                                                     for g in groups[-1])) <= self.max_positions:
                groups[-1].append(r)
            else:
                groups.append([r])
        return groups

    def _prefill(self, rows: list[int]):
        groups = self.prefill_groups(rows)
        if len(groups) > 1:
            parts = [self._prefill(g) for g in groups]
            return [r for done, _ in parts for r in done], torch.cat([logits for _, logits in parts])
        width = max(len(self.rows[r].pending) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(self.rows[r].pending)] = torch.tensor(self.rows[r].pending)
        offset = torch.tensor([self.rows[r].filled for r in rows], device=self.device)
        pos = offset[:, None] + torch.arange(width, device=self.device)[None]
        last = torch.tensor([len(self.rows[r].pending) - 1 for r in rows], device=self.device)
        slots = torch.tensor([self.rows[r].slot for r in rows], device=self.device)
        logits = self._run(ids.to(self.device), pos, slots, offset, width, last[:, None])
        for r in rows:
            self.rows[r].filled += len(self.rows[r].pending)
            self.rows[r].pending = []
        self.forwards["prefill"] += 1
        return rows, logits[:, -1]

    @torch.inference_mode()
    def advance(self, stop_ids, params: SamplingParams, generator=None) -> dict[int, Turn]:
        training = self.model.training
        self.model.eval()                          # no dropout while sampling; restored after
        try:
            return self._advance(set(stop_ids), params, generator)
        finally:
            self.model.train(training)

    def _advance(self, stops: set[int], params: SamplingParams, generator) -> dict[int, Turn]:
        done: dict[int, Turn] = {}
        self._compact()
        while not done:
            open_rows = [r for r, row in self.rows.items() if row.turn is not None]
            if not open_rows:
                return done
            waiting = [r for r in open_rows if len(self.rows[r].pending) > 1]
            decoding = len(open_rows) - len(waiting)
            if waiting and (not decoding or len(waiting) >= self.prefill_fraction * len(open_rows)):
                active, logits = self._prefill(waiting)
            else:
                active, logits = self._decode()
            turns = [self.rows[r].turn for r in active]
            force = torch.tensor([row.prefix[len(t.ids)] if len(t.ids) < len(row.prefix) else -1
                                  for row, t in ((self.rows[r], t) for r, t in zip(active, turns))],
                                 dtype=torch.long, device=self.device)
            tokens, logp, logq = sample_tokens(logits, params, generator, force)
            tokens, logp, logq, force = tokens.tolist(), logp.tolist(), logq.tolist(), force.tolist()
            for i, r in enumerate(active):
                row, t, tok = self.rows[r], turns[i], tokens[i]
                t.n_forced += force[i] >= 0
                t.ids.append(tok)
                t.logprobs.append(logp[i])
                t.sample_logprobs.append(logq[i])
                row.pending = [tok]
                t.stopped = tok in stops
                if t.stopped or len(t.ids) >= row.budget:
                    done[r] = t
                    row.turn = None
        return done


BACKENDS = ("auto", "lean", "hf", "vllm")


def make_policy(model, backend: str = "auto", pad_id: int = 0, **kwargs) -> Policy:
    """The rollout backend named by ``backend`` over ``model``.

    ``auto`` is the fastest correct one: ``lean`` (`engine.lean`) for the Qwen2 models this
    project trains, ``hf`` for anything else; ``vllm`` needs the optional extra
    (`engine.vllm_backend`). Raises ``ValueError`` with the fix for an unknown or unusable one.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend in ("auto", "lean"):
        from engine.lean import LeanPolicy, UnsupportedModel, check_supported

        try:
            check_supported(model)
        except UnsupportedModel:
            if backend == "lean":
                raise
            return HFPolicy(model, pad_id)
        return LeanPolicy(model, pad_id)
    if backend == "vllm":
        from engine.vllm_backend import VLLMPolicy

        return VLLMPolicy(model, pad_id, **kwargs)
    return HFPolicy(model, pad_id)
