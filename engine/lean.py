"""The lean decode path: a plain-torch Qwen2 forward over the engine's ragged KV cache.

Why this exists: a decode step of the models trained here is a few milliseconds of arithmetic,
but through `transformers` it costs several times that in per-step framework work (module
dispatch, cache objects, mask builders, dtype checks), and rollouts are what every experiment
waits on. `LeanPolicy` keeps `HFPolicy`'s row bookkeeping (rows, turns, continuous batching,
prefill scheduling, the ragged cache of ``[rows, kv_heads, capacity, head_dim]`` buffers) and
replaces only the forward pass:

* the weights are read from the model once per rollout (`LeanPolicy.reset`), with q/k/v and
  gate/up fused into one matrix each, so a layer is 4 matmuls; a model trained between rollouts
  is therefore always decoded with its current weights;
* rotary cos/sin come from one table indexed by position ids; the additive mask ``slot <= query
  position`` is built once per step and shared by every layer;
* attention is grouped-query attention written out as two batched matmuls over the cache view
  (no repeat of the key/value heads, no copy of the cache on the decode path);
* on a CPU, once rows are long and their lengths spread, attention runs row by row over each
  row's own slots and skips rows whose logits nobody reads (a row waiting for its observation to
  be prefilled): decode is bound by reading the KV cache (one core reads ~13 GB/s), and padding
  every row to the longest one read ~30% more than needed in a tiny evaluation.

Numerically it is the same function as `transformers`' Qwen2 (RMSNorm in fp32, rotary embedding,
softmax attention, SwiGLU): the tests compare its log-probs with `HFPolicy`'s on the same
sequences (fp32, within 1e-5). Only the Qwen2 architecture this project trains is supported
(`check_supported` names what is not).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.backend import HFPolicy, grown_shape


class UnsupportedModel(ValueError):
    """The lean path cannot run this model (another architecture or an option it lacks)."""


def check_supported(model) -> None:
    """Raise `UnsupportedModel` unless ``model`` is a Qwen2 causal LM the lean forward reproduces."""
    cfg = model.config.get_text_config()
    problems = []
    if cfg.model_type != "qwen2":
        problems.append(f"architecture {cfg.model_type!r} (only qwen2)")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        problems.append(f"activation {cfg.hidden_act!r}")
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        problems.append(f"rope type {rope.get('rope_type')!r}")
    if getattr(cfg, "use_sliding_window", False):
        problems.append("sliding-window attention")
    if problems:
        raise UnsupportedModel("the lean backend does not support " + ", ".join(problems)
                               + "; use --backend hf")


class _Weights:
    """A snapshot of the model's weights in the layout the lean forward uses."""

    @torch.no_grad()
    def __init__(self, model, max_positions: int):
        cfg = model.config.get_text_config()
        body = model.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.embed = body.embed_tokens.weight.detach()
        self.head = model.lm_head.weight.detach()
        self.norm = body.norm.weight.detach()
        self.layers = []
        for layer in body.layers:
            a, m = layer.self_attn, layer.mlp
            qkv_w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            qkv_b = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
            gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight])
            self.layers.append((layer.input_layernorm.weight.detach(), qkv_w, qkv_b, a.o_proj.weight.detach(),
                                layer.post_attention_layernorm.weight.detach(), gate_up, m.down_proj.weight.detach()))
        rotary = body.rotary_emb
        positions = torch.arange(max_positions, device=self.embed.device, dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.to(device=positions.device, dtype=torch.float32)[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = getattr(rotary, "attention_scaling", 1.0)
        self.cos = (emb.cos() * scale).to(self.embed.dtype)
        self.sin = (emb.sin() * scale).to(self.embed.dtype)


def _rms_norm(x, weight, eps):
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


class _LeanCache:
    """Per-layer KV buffers with keys stored transposed, ``[rows, kv_heads, head_dim, capacity]``,
    so that query x keys is a plain batched matmul over a view of the cache (no copy); values
    ``[rows, kv_heads, capacity, head_dim]``. Slot index == position id, as in `HFPolicy`."""

    def __init__(self, n_layers: int, heads: int, dim: int, dtype, device):
        self.heads, self.dim = heads, dim
        self.k = [torch.zeros(0, heads, dim, 0, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(0, heads, 0, dim, dtype=dtype, device=device) for _ in range(n_layers)]

    @property
    def shape(self) -> tuple[int, int]:
        return self.v[0].shape[0], self.v[0].shape[2]

    def reserve(self, rows: int, length: int) -> None:
        """Grow (by doubling) to at least ``rows`` x ``length`` slots, keeping the contents."""
        have_rows, have_len = self.shape
        grown = grown_shape(have_rows, have_len, rows, length)
        if grown is None:
            return
        new_rows, new_len = grown
        for i, (k, v) in enumerate(zip(self.k, self.v)):
            self.k[i] = k.new_zeros(new_rows, self.heads, self.dim, new_len)
            self.k[i][:have_rows, :, :, :have_len] = k
            self.v[i] = v.new_zeros(new_rows, self.heads, new_len, self.dim)
            self.v[i][:have_rows, :, :have_len] = v

    def keep_rows(self, index: torch.Tensor) -> None:
        self.k = [k.index_select(0, index) for k in self.k]
        self.v = [v.index_select(0, index) for v in self.v]

    def write_index(self, rows, slots) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat indices into one layer's k and v buffers for new entries ``[n, W, kv_heads, head_dim]``
        of buffer ``rows [n]`` at ``slots [n, W]`` (the same for every layer)."""
        _, heads, dim, cap = self.k[0].shape
        device = slots.device
        h = torch.arange(heads, device=device)[:, None]
        j = torch.arange(dim, device=device)[None, :]
        row = (rows * heads * dim * cap)[:, None, None, None]
        slot = slots[:, :, None, None]
        k_index = row + (h * dim * cap + j * cap)[None, None] + slot
        v_index = row + (h * cap * dim + j)[None, None] + slot * dim
        return k_index.reshape(-1), v_index.reshape(-1)


def _padded_attention(q, keys, values, mask, n: int, width: int, kvh: int, group: int, d: int, scale: float):
    """Attention of every fed row over the same ``kv_len`` slots (``mask`` hides each row's
    future and padding): two batched matmuls, cheapest when the rows' lengths are close."""
    kv_len = keys.shape[-1]
    if width == 1:
        qg = q.view(n, kvh, group, d)
    else:
        qg = q.reshape(n, width, kvh, group, d).permute(0, 2, 3, 1, 4).reshape(n, kvh, group * width, d)
    scores = torch.matmul(qg, keys).mul_(scale)                              # [n, KV, G*W, L]
    probs = torch.softmax(scores.view(n, kvh, group, width, kv_len).add_(mask), dim=-1)
    att = torch.matmul(probs.view(n, kvh, group * width, kv_len), values)
    if width == 1:
        return att.view(n, 1, kvh * group * d)
    return att.view(n, kvh, group, width, d).permute(0, 3, 1, 2, 4).reshape(n, width, kvh * group * d)


def _ragged_attention(q, ck, cv, ragged, width: int, kvh: int, group: int, d: int, scale: float):
    """Attention row by row over exactly each row's own slots: ``ragged`` lists ``(i, b, start, w)``
    = fed row ``i`` in buffer row ``b``, its ``w`` new tokens at slots ``start..start+w-1``. Rows not
    listed get zeros (their logits are not read). Reads no padding and no idle row, at the price of
    a few small ops per row: the better choice once rows are long and their lengths spread."""
    n = q.shape[0]
    att = q.new_zeros(n, width, kvh * group * d)
    for i, b, start, w in ragged:
        length = start + w
        keys, values = ck[b, :, :, :length], cv[b, :, :length]               # [KV, d, L], [KV, L, d]
        if w == 1:
            scores = torch.matmul(q[i, 0].view(kvh, group, d), keys).mul_(scale)
            att[i, 0] = torch.matmul(torch.softmax(scores, dim=-1), values).view(-1)
            continue
        qg = q[i, :w].reshape(w, kvh, group, d).permute(1, 2, 0, 3).reshape(kvh, group * w, d)
        scores = torch.matmul(qg, keys).mul_(scale).view(kvh, group, w, length)
        scores[..., start:].masked_fill_(_future(w, q.device), float("-inf"))  # causal within the chunk
        out = torch.matmul(torch.softmax(scores, dim=-1).view(kvh, group * w, length), values)
        att[i, :w] = out.view(kvh, group, w, d).permute(2, 0, 1, 3).reshape(w, -1)
    return att


def _future(w: int, device) -> torch.Tensor:
    return torch.ones(w, w, dtype=torch.bool, device=device).triu_(1)


# Ragged attention costs about this many cache slots' worth of reads in per-row overhead (measured
# on one CPU core: ~20 us of small ops per row and layer against ~40 ns per slot).
RAGGED_ROW_COST = 512


def choose_ragged(ragged, n: int, kv_len: int):
    """``ragged`` when reading each row's own slots (plus the per-row overhead) beats reading
    ``n x kv_len`` padded slots, else None. On CUDA one padded kernel is always better."""
    own = sum(start + w + RAGGED_ROW_COST for _, _, start, w in ragged)
    return ragged if own < n * kv_len else None


def lean_forward(w: _Weights, cache: _LeanCache, ids, pos, rows, offset, kv_len: int, keep,
                 ragged=None) -> torch.Tensor:
    """Logits ``[n, V]`` at position ``keep[i]`` of each fed row, writing the new keys/values.

    ``ids``/``pos`` ``[n, W]``; ``rows`` the buffer rows fed (None: all, in order); ``offset``
    ``[n]`` their first write slot; ``kv_len`` the key slots attention reads; ``keep`` ``[n]``;
    ``ragged``: attend row by row (`_ragged_attention`) instead of over ``kv_len`` padded slots.
    """
    n, width = ids.shape
    h, kvh, d = w.heads, w.kv_heads, w.head_dim
    group, half = h // kvh, d // 2
    device = ids.device
    x = F.embedding(ids, w.embed)                                            # [n, W, hidden]
    cos = w.cos[pos][:, :, None]                                             # [n, W, 1, d]
    sin = w.sin[pos][:, :, None]
    sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)            # rotate_half's sign folded in
    mask = None
    if ragged is None:
        slots = torch.arange(kv_len, device=device)
        mask = torch.zeros((n, width, kv_len), dtype=x.dtype, device=device)
        mask.masked_fill_(slots[None, None, :] > pos[:, :, None], torch.finfo(x.dtype).min)
        mask = mask.view(n, 1, 1, width, kv_len)
    write_rows = torch.arange(n, device=device) if rows is None else rows
    k_index, v_index = cache.write_index(write_rows, offset[:, None] + torch.arange(width, device=device)[None])
    scale = d ** -0.5
    for i, (ln1, qkv_w, qkv_b, o_w, ln2, gate_up, down) in enumerate(w.layers):
        qkv = F.linear(_rms_norm(x, ln1, w.eps), qkv_w, qkv_b)
        qk = qkv[..., :(h + kvh) * d].view(n, width, h + kvh, d)
        qk = qk * cos + qk.roll(half, dims=-1) * sin                         # rotary, q and k at once
        q, k = qk[:, :, :h], qk[:, :, h:]                                    # [n, W, H|KV, d]
        v = qkv[..., (h + kvh) * d:]
        ck, cv = cache.k[i], cache.v[i]
        ck.view(-1).index_copy_(0, k_index, k.reshape(-1))
        cv.view(-1).index_copy_(0, v_index, v.reshape(-1))
        if ragged is not None:
            att = _ragged_attention(q, ck, cv, ragged, width, kvh, group, d, scale)
        else:
            keys, values = ck[..., :kv_len], cv[:, :, :kv_len]              # [B, KV, d, L], [B, KV, L, d]
            if rows is not None:
                keys, values = keys.index_select(0, rows), values.index_select(0, rows)
            att = _padded_attention(q, keys, values, mask, n, width, kvh, group, d, scale)
        x = x + F.linear(att, o_w)
        gate, up = F.linear(_rms_norm(x, ln2, w.eps), gate_up).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, down)
    last = x[torch.arange(n, device=device), keep]                          # [n, hidden]
    return F.linear(_rms_norm(last, w.norm, w.eps), w.head)


class LeanPolicy(HFPolicy):
    """`HFPolicy`'s rows and cache with the plain-torch Qwen2 forward (see the module doc)."""

    def __init__(self, model, pad_id: int = 0, prefill_fraction: float = 0.125):
        check_supported(model)
        self._max_positions = self.max_positions = model.config.get_text_config().max_position_embeddings
        super().__init__(model, pad_id, prefill_fraction)

    cache_class = _LeanCache

    def reset(self) -> None:
        super().reset()
        self.weights = _Weights(self.model, self._max_positions)   # the model's current weights

    def _run(self, ids, pos, rows, offset, width: int, keep, live=None) -> torch.Tensor:
        kv_len = int(offset.max()) + width
        if kv_len > self._max_positions:
            raise ValueError(f"sequence of {kv_len} tokens exceeds max_position_embeddings={self._max_positions}")
        self.cache.reserve(len(self.slot_owner), kv_len)
        n = ids.shape[0]
        keep = torch.full((n,), width - 1, device=self.device) if isinstance(keep, int) else keep[:, 0]
        ragged = None
        if self.device.type == "cpu":
            starts, widths = offset.tolist(), (keep + 1).tolist()
            buffer_rows = range(n) if rows is None else rows.tolist()
            fed = range(n) if live is None else live
            ragged = choose_ragged([(i, buffer_rows[i], starts[i], widths[i]) for i in fed], n, kv_len)
        return lean_forward(self.weights, self.cache, ids, pos, rows, offset, kv_len, keep, ragged)[:, None]
