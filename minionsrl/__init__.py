"""minionsrl: deep RL with serverless actors.

Kept import-light on purpose: rollout functions import submodules of this package and must not
pay for torch. Use ``from minionsrl.build import make_trainer`` and ``from minionsrl.config import
TrainConfig`` for the Python API.
"""

__version__ = "0.1.0"
