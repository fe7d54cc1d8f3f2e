"""Qwen2 (Qwen2.5-architecture) causal LMs built from a `PretrainConfig`, and their cost model.

Why this exists: every preset is built through `transformers.Qwen2Config` /
`Qwen2ForCausalLM` so that checkpoints are ordinary Hugging Face folders (``config.json`` +
``model.safetensors`` + tokenizer files) that `AutoModelForCausalLM.from_pretrained` and the
rollout engine load without any code of ours. The FLOP count and the matmul-peak probe live here
too, because both the trainer's time estimate and the benchmark's utilisation figure use them.

``python -m pretrain.model`` prints the exact parameter count of every preset.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from pretrain.config import PRESETS, PretrainConfig, make_config


def qwen2_config(cfg: PretrainConfig, vocab_size: int | None = None, special=None):
    """The `transformers.Qwen2Config` for ``cfg``; ``special`` (SpecialIds) sets pad/eos ids."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size or cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        hidden_act="silu",
        attention_dropout=0.0,
        use_cache=True,
        pad_token_id=None if special is None else special.pad,
        eos_token_id=None if special is None else special.eos,
        bos_token_id=None,
    )


def build_model(cfg: PretrainConfig, vocab_size: int | None = None, special=None, seed: int | None = None):
    """A freshly initialised fp32 `Qwen2ForCausalLM` using SDPA attention.

    The initialisation is a pure function of ``seed`` (default ``cfg.seed``), so every process of
    a distributed run builds the same weights.
    """
    from transformers import Qwen2ForCausalLM

    config = qwen2_config(cfg, vocab_size, special)
    config._attn_implementation = "sdpa"
    torch.manual_seed(cfg.seed if seed is None else seed)
    model = Qwen2ForCausalLM(config)
    return model.float()


def count_params(model) -> int:
    """Unique parameters (tied input/output embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def analytic_params(cfg: PretrainConfig, vocab_size: int | None = None) -> int:
    """Parameter count of ``cfg`` from its shape alone (no model built): Qwen2 layout with
    q/k/v biases, no o_proj bias, SwiGLU MLP, two RMSNorms per layer plus a final one."""
    v = vocab_size or cfg.vocab_size
    h, i = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_kv_heads * (h // cfg.num_heads)
    attn = h * h + h + 2 * (h * kv + kv) + h * h
    layer = attn + 3 * h * i + 2 * h
    embed = v * h * (1 if cfg.tie_embeddings else 2)
    return cfg.num_layers * layer + embed + h


def train_flops_per_token(cfg: PretrainConfig, n_params: int, context: int | None = None) -> float:
    """Forward+backward FLOPs per trained token: 6*N for the weights (the tied embedding counts
    once, as the LM-head matmul) plus causal attention 6*L*h*T (QK^T and AV, halved by the mask,
    times 3 for forward+backward)."""
    t = cfg.block_size if context is None else context
    return 6.0 * n_params + 6.0 * cfg.num_layers * cfg.hidden_size * t


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 natively: the AVX512-BF16 or AMX-BF16 instructions (Linux's
    CPU flags) and a oneDNN build that uses them.  oneDNN alone also says yes on AVX-512 CPUs that
    only emulate bf16, where it is no faster; elsewhere than Linux the answer is no (fp32).

    Where it is native, a bf16 matmul runs several times faster than fp32 (one core of this
    project's AMD EPYC machines: ~380 against ~56 GFLOP/s), so CPU runs can autocast as CUDA runs do."""
    try:
        flags = {f for line in Path(cpuinfo).read_text().splitlines() if line.startswith("flags")
                 for f in line.split(":", 1)[1].split()}
        return bool({"avx512_bf16", "amx_bf16"} & flags) and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (OSError, AttributeError, RuntimeError):     # no /proc, a build without oneDNN, an older torch
        return False


# the instruction sets torch's CPU kernels (its own, oneDNN's, MKL's) choose among: two CPUs that both
# report AVX512 to torch may still take different paths (AMX, VNNI), and sum in another order
KERNEL_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8")


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This CPU as a run's numbers depend on it: its model name, torch's capability and the kernel
    instruction sets it has (``KERNEL_FLAGS``). A run trained again on a CPU described otherwise may
    differ in the last bits from its first step on; on one described the same, it has not."""
    model, flags = "unknown", set()
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return f"{model} [{torch.backends.cpu.get_cpu_capability()}: {' '.join(f for f in KERNEL_FLAGS if f in flags)}]"


def matmul_peak_flops(device: str | torch.device = "cpu", n: int | None = None, seconds: float = 0.5) -> float:
    """Measured FLOP/s of a large square ``torch.mm`` (fp32 on CPU, bf16 on CUDA)."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    n = n or (8192 if cuda else 2048)
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.mm(a, b)
    sync()
    reps, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        reps += 1
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and reps >= 2:
            return 2.0 * n ** 3 * reps / elapsed


def preset_table(vocab_size: int = 3000) -> list[dict]:
    """Rows (scale, shape, exact parameter count) for every preset, counted on the real module."""
    rows = []
    for scale in PRESETS:
        cfg = make_config(scale)
        with torch.device("meta"):  # shapes only: no memory, no initialisation time
            model = build_model(cfg, vocab_size)
        rows.append({
            "scale": scale, "hidden": cfg.hidden_size, "layers": cfg.num_layers, "heads": cfg.num_heads,
            "kv_heads": cfg.num_kv_heads, "ffn": cfg.intermediate_size, "vocab": vocab_size,
            "block": cfg.block_size, "params": count_params(model),
        })
    return rows


def main() -> int:
    print("| scale | hidden | layers | heads | kv heads | ffn | vocab | block | parameters |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in preset_table():
        print(f"| {r['scale']} | {r['hidden']} | {r['layers']} | {r['heads']} | {r['kv_heads']} | {r['ffn']} "
              f"| {r['vocab']} | {r['block']} | {r['params']:,} ({r['params'] / 1e6:.2f}M) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
