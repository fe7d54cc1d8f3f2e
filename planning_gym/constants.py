"""Each paper's constants in one place: imported wherever they are used, never restated.

Physics of planning (the gym, pre-training, GRPO / OPD / MOPD): evaluation samples K = 8
trajectories per task at temperature 0.4 with a 20-step limit; post-training runs 75 steps;
OPD's reverse KL is taken on the top 100 tokens.

TurnOPD (its Table 7): ``distill_topk = 50``, the *teacher's* top-K support; probes every 8
steps after 3 warm-up steps; EMA 0.3 on the probe statistics; depth cap within [1, 20] turns.
"""
from planning_gym.env import EVAL_STEP_LIMIT
from planning_gym.tasks import BINS

DIFFICULTIES = tuple(BINS)              # ("short", "mid", "long"): the corpus's horizon bins

EVAL_K = 8
EVAL_TEMPERATURE = 0.4
STEP_LIMIT = EVAL_STEP_LIMIT            # 20
PAPER_POSTTRAIN_STEPS = 75

PHYSICS_OPD_TOPK = 100
TURNOPD_TOPK = 50
TURNOPD_PROBE_INTERVAL = 8
TURNOPD_PROBE_WARMUP = 3
TURNOPD_EMA_ALPHA = 0.3
TURNOPD_H_MAX = 20
