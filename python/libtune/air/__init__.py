"""libtune.air: Ray's ``ray.air`` spellings of the tracker integrations
(``libtune.air.integrations.mlflow``, ``.wandb``)."""
