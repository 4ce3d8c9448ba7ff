"""PyTorch Lightning, with Ray Tune's name: TuneReportCheckpointCallback reports the
Trainer's logged metrics (``trainer.callback_metrics``) and, by default, a checkpoint
(``trainer.save_checkpoint``) at the end of each validation, so a Lightning script
becomes a trial by adding one callback::

    from libtune.integrations.lightning import TuneReportCheckpointCallback
    trainer = pl.Trainer(callbacks=[TuneReportCheckpointCallback({"loss": "val_loss"}, on="validation_end")])

Each report is one result of the trial (its training_iteration counts them); a trial
the scheduler stops ends there, as in Ray. A trial started again from its checkpoint
finds it with ``tune.get_checkpoint()`` (``<dir>/checkpoint``, for ``ckpt_path=``). Works
with ``lightning.pytorch`` or, without it, ``pytorch_lightning``."""

import math
import os
import sys

try:
    import lightning.pytorch as pl
except ImportError:
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise ImportError("libtune.integrations.lightning needs PyTorch Lightning in this Python: pip install "
                          "lightning") from None

import libtune as _trial

from ..tune._session import Checkpoint, report

__all__ = ["TuneReportCheckpointCallback", "TuneReportCallback"]

_HOOKS = ("fit_start", "fit_end", "sanity_check_start", "sanity_check_end", "train_epoch_start", "train_epoch_end",
          "validation_epoch_start", "validation_epoch_end", "test_epoch_start", "test_epoch_end", "train_batch_start",
          "train_batch_end", "validation_batch_start", "validation_batch_end", "test_batch_start", "test_batch_end",
          "train_start", "train_end", "validation_start", "validation_end", "test_start", "test_end", "exception")


def _number(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class TuneReportCheckpointCallback(pl.Callback):
    """metrics: None (every logged metric), a name, a list of names, or a dict
    {reported name: logged name}. filename: the checkpoint's file in its folder.
    save_checkpoints: False reports metrics only. on: the hook(s) to report at
    ("validation_end", "train_epoch_end", ...)."""

    def __init__(self, metrics=None, filename="checkpoint", save_checkpoints=True, on="validation_end"):
        super().__init__()
        hooks = [on] if isinstance(on, str) else list(on)
        for hook in hooks:
            if hook not in _HOOKS:
                raise ValueError(f"TuneReportCheckpointCallback(on={hook!r}): give one of {', '.join(_HOOKS)}")
        if isinstance(metrics, str):
            metrics = [metrics]
        if metrics is not None and not isinstance(metrics, (list, tuple, dict)):
            raise TypeError(f"TuneReportCheckpointCallback(metrics=...): give a name, a list or a dict, not "
                            f"{type(metrics).__name__}")
        self._metrics = metrics
        self._filename = filename
        self._save = bool(save_checkpoints)
        self._hooks = set(hooks)
        self._missing = set()

    def _collect(self, trainer):
        logged = trainer.callback_metrics
        wanted = (self._metrics if isinstance(self._metrics, dict)
                  else {n: n for n in self._metrics} if self._metrics is not None else {n: n for n in logged})
        out = {}
        for name, source in wanted.items():
            if source not in logged:
                if source not in self._missing:
                    self._missing.add(source)
                    print(f"libtune: TuneReportCheckpointCallback: the Trainer has not logged {source!r} (it has: "
                          f"{', '.join(sorted(logged)) or 'nothing yet'}); log it with self.log({source!r}, ...)",
                          file=sys.stderr)
                continue
            value = _number(logged[source])
            if value is not None and math.isfinite(value):
                out[name] = value
        return out

    def _handle(self, trainer, pl_module):
        if trainer.sanity_checking or not _trial.in_trial():
            return
        metrics = self._collect(trainer)
        if not metrics:
            return
        if not self._save:
            if trainer.is_global_zero:
                report(metrics)
            return
        # Straight into the folder of the result it goes with (no copy).
        folder = _trial.checkpoint_dir(_trial._next_iteration()) if trainer.is_global_zero else None
        trainer.save_checkpoint(os.path.join(folder or ".", self._filename))
        if trainer.is_global_zero:
            report(metrics, checkpoint=Checkpoint.from_directory(folder))


def _hook(name):
    def call(self, trainer, pl_module, *args, **kwargs):
        if name in self._hooks:
            self._handle(trainer, pl_module)
    call.__name__ = f"on_{name}"
    return call


for _name in _HOOKS:
    setattr(TuneReportCheckpointCallback, f"on_{_name}", _hook(_name))


class TuneReportCallback(TuneReportCheckpointCallback):
    """Ray's older name: metrics only, no checkpoints."""

    def __init__(self, metrics=None, on="validation_end"):
        super().__init__(metrics=metrics, save_checkpoints=False, on=on)
