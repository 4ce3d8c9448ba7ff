"""``ray.air.integrations.mlflow``: libtune.integrations.mlflow."""
from ...integrations.mlflow import MLflowLoggerCallback, setup_mlflow

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]
