"""Ray Tune's ``ray.tune.utils``: ``validate_save_restore`` (a Trainable class's
checkpoints round-trip) and ``wait_for_gpu`` (a card's memory freed)."""

import os
import subprocess
import tempfile
import time

__all__ = ["validate_save_restore", "wait_for_gpu"]


def validate_save_restore(trainable_cls, config=None, num_gpus=0):
    """True when a Trainable class resumes correctly: one instance steps three times and
    saves; a second restores that checkpoint and its next step's training_iteration
    follows on. Runs here, in this process (no trial is started)."""
    from .._session import Checkpoint
    from ..trainable import Trainable
    if not (isinstance(trainable_cls, type) and issubclass(trainable_cls, Trainable)):
        raise TypeError(f"validate_save_restore: give a tune.Trainable subclass, not {trainable_cls!r}")
    first, second = trainable_cls(config or {}), trainable_cls(config or {})
    with tempfile.TemporaryDirectory(prefix="libtune-validate-") as folder:
        for _ in range(3):
            first.step()
            first._iteration += 1
        state = first.save_checkpoint(folder)
        if isinstance(state, dict):
            second.load_checkpoint(state)
        else:
            second.load_checkpoint(folder if state is None else os.fspath(state))
        second._iteration = first._iteration
        before = first.step()
        after = second.step()
    first.cleanup()
    second.cleanup()
    if isinstance(before, dict) and isinstance(after, dict) and "training_iteration" in before:
        assert before["training_iteration"] == after["training_iteration"], \
            f"{trainable_cls.__name__}: after a restore, training_iteration is {after['training_iteration']}, " \
            f"not {before['training_iteration']}"
    return True


def _used_mib(gpu_id):
    query = ["nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.total", "--format=csv,noheader,nounits"]
    out = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        index, uuid, used, total = [x.strip() for x in line.split(",")]
        if str(gpu_id) in (index, uuid):
            return float(used), float(total)
    raise ValueError(f"wait_for_gpu: no GPU {gpu_id!r} here (nvidia-smi lists {out.strip() or 'none'})")


def wait_for_gpu(gpu_id=None, target_util=0.01, retry=20, delay_s=5, gpu_memory_limit=None):
    """Waits until the card's memory in use is at most ``target_util`` of it (Ray's),
    checking ``retry`` times ``delay_s`` apart; True then, a RuntimeError after. Without
    gpu_id: the trial's first card (CUDA_VISIBLE_DEVICES)."""
    if gpu_memory_limit is not None:
        target_util = gpu_memory_limit
    if gpu_id is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if not visible:
            raise RuntimeError("wait_for_gpu: this process was given no GPU (CUDA_VISIBLE_DEVICES is empty)")
        gpu_id = visible.split(",")[0]
    for attempt in range(retry):
        used, total = _used_mib(gpu_id)
        if total and used / total <= target_util:
            return True
        if attempt < retry - 1:
            time.sleep(delay_s)
    raise RuntimeError(f"wait_for_gpu: GPU {gpu_id} still has {used:.0f} of {total:.0f} MiB in use after "
                       f"{retry} checks {delay_s} s apart")
