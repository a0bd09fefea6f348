"""Log a run to Weights & Biases offline (``--track``, the ``wandb`` extra), kept in RUN_DIR/wandb/ for a later
``wandb sync``. The command-line equivalent:

    WANDB_MODE=offline minionsrl train --env-id CartPole-v1 --max-rounds 3 --track --wandb-project-name demo

    python examples/track_offline.py
"""

import os
from pathlib import Path

from minionsrl import TrainConfig, train

os.environ.setdefault("WANDB_MODE", "offline")  # no account, no network
os.environ.setdefault("WANDB_SILENT", "true")
summary = train(TrainConfig(env_id="CartPole-v1", actors=2, max_rounds=3, track=True,
                            wandb_project_name="minionsrl-examples", run_dir="runs/examples/tracked", progress=False))
print("W&B files:", sorted(p.name for p in Path("runs/examples/tracked/wandb").iterdir()))
