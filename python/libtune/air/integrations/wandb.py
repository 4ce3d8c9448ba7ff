"""``ray.air.integrations.wandb``: libtune.integrations.wandb."""
from ...integrations.wandb import WandbLoggerCallback, setup_wandb

__all__ = ["WandbLoggerCallback", "setup_wandb"]
