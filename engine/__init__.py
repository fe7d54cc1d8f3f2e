"""The rollout engine: what pre-training's evaluation, post-training and the reproductions share.

Why a package of its own: every stage after pre-training plays many multi-turn episodes of a
model against `planning_gym` tasks; post-training is one client of this package among others
(`make pretrain` ends in `engine.evaluate`, not in post-training code). Read in this order:

1. `engine.backend`       the `Policy` protocol (rows, turns, continuous batching), sampling,
                          `HFPolicy` (any transformers causal LM) and `make_policy` (``auto``)
2. `engine.lean`          `LeanPolicy`: the same rows and cache, a plain-torch Qwen2 forward
3. `engine.vllm_backend`  `VLLMPolicy`: the protocol over vLLM (optional extra, ``make vllm``)
4. `engine.rollout`       episodes with the environment in the loop, token ids never re-encoded
5. `engine.evaluate`      avg@K / pass@K per split x difficulty, baselines beside every score

Backends (``--backend``, the ``backend`` config field): ``auto`` (the default) is ``lean`` for
the Qwen2 models this project trains and ``hf`` otherwise. Speed: ``make bench-rollout``.
"""
