"""Hugging Face transformers: TuneReportCallback, a TrainerCallback that reports the
Trainer's evaluation metrics (``eval_loss``, ``eval_accuracy``, ... with ``epoch`` and
``step``) as the trial's results and each checkpoint the Trainer saves as the
checkpoint of the result it goes with, so a Trainer script becomes a trial by adding
one callback::

    from libtune.integrations.huggingface import TuneReportCallback
    trainer = Trainer(..., callbacks=[TuneReportCallback()])

An evaluation followed by a save at the same step (eval_strategy and save_strategy
alike) is one result with its checkpoint, whose files are linked, not copied, where the
file system allows. A trial started again from its checkpoint finds the Trainer's
folder with ``tune.get_checkpoint()`` (for ``trainer.train(resume_from_checkpoint=...)``).
A trial the scheduler stops ends there, as in Ray."""

import math
import os
import shutil

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("libtune.integrations.huggingface needs transformers in this Python: pip install "
                      "transformers") from None

import libtune as _trial

from ..tune._session import Checkpoint, report

__all__ = ["TuneReportCallback"]


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class TuneReportCallback(TrainerCallback):
    """metrics: None (every number of the evaluation), or the names to report.
    save_checkpoints: False reports metrics only."""

    def __init__(self, metrics=None, save_checkpoints=True):
        if isinstance(metrics, str):
            metrics = [metrics]
        self._metrics = None if metrics is None else list(metrics)
        self._save = bool(save_checkpoints)
        self._pending = None

    def _numbers(self, metrics, state):
        out = {}
        for name, value in (metrics or {}).items():
            if self._metrics is not None and name not in self._metrics:
                continue
            if hasattr(value, "item"):
                value = value.item()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                out[name] = float(value)
        out["epoch"] = float(state.epoch or 0)
        out["step"] = int(state.global_step)
        return out

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not state.is_world_process_zero or not _trial.in_trial():
            return
        result = self._numbers(metrics, state)
        if self._save and control.should_save:
            self._pending = result  # the save that follows at this step carries it
        else:
            report(result)

    def on_save(self, args, state, control, **kwargs):
        if not self._save or not state.is_world_process_zero or not _trial.in_trial():
            return
        source = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        result, self._pending = self._pending or self._numbers({}, state), None
        if not os.path.isdir(source):
            report(result)
            return
        folder = _trial.checkpoint_dir(_trial._next_iteration())
        shutil.copytree(source, folder, copy_function=_link_or_copy, dirs_exist_ok=True)
        report(result, checkpoint=Checkpoint.from_directory(folder))

    def on_train_end(self, args, state, control, **kwargs):
        if self._pending is not None and state.is_world_process_zero and _trial.in_trial():
            result, self._pending = self._pending, None
            report(result)
