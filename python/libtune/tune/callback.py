"""Ray Tune's ``Callback`` (``ray.tune.Callback``, ``ray.tune.callback``): experiment and
trial events, called in the driver, the program that runs ``Tuner.fit()``.

Hooks run one at a time, in the order the events happened; the engine does not wait for
them (a trial goes on while its result's callbacks run), so a slow callback delays only
what waits on it. ``iteration`` counts the batches of events the driver handled (Ray's
counts its control loop's steps). A callback that raises ends the experiment: every
trial stops, and ``fit()`` raises that exception, naming the hook and the trial
(``Tuner.restore`` continues). ``result[SHOULD_CHECKPOINT] = True`` in
``on_trial_result`` asks that trial for a checkpoint now."""

from typing import Any, Dict, List, Optional

__all__ = ["Callback", "CallbackList"]


class Callback:
    """Override the hooks you need; each gets ``**info`` for arguments added later."""

    def setup(self, stop: Any = None, num_samples: Optional[int] = None, total_num_samples: Optional[int] = None,
              **info: Any) -> None:
        """Once, before the first trial starts."""

    def on_step_begin(self, iteration: int, trials: List["Trial"], **info: Any) -> None:
        """Before the driver handles a batch of events."""

    def on_step_end(self, iteration: int, trials: List["Trial"], **info: Any) -> None:
        """After it handled one."""

    def on_trial_start(self, iteration: int, trials: List["Trial"], trial: "Trial", **info: Any) -> None:
        """A trial starts (its first start)."""

    def on_trial_restore(self, iteration: int, trials: List["Trial"], trial: "Trial", **info: Any) -> None:
        """A trial starts again from a checkpoint (resumed, restarted, PBT's exploit)."""

    def on_trial_save(self, iteration: int, trials: List["Trial"], trial: "Trial", **info: Any) -> None:
        """A checkpoint of the trial is stored in the experiment folder."""

    def on_trial_result(self, iteration: int, trials: List["Trial"], trial: "Trial", result: Dict, **info: Any) -> None:
        """A result: set ``result["should_checkpoint"] = True`` to ask for a checkpoint."""

    def on_trial_complete(self, iteration: int, trials: List["Trial"], trial: "Trial", **info: Any) -> None:
        """The trial ended well (by itself, or stopped)."""

    def on_trial_recover(self, iteration: int, trials: List["Trial"], trial: "Trial", **info: Any) -> None:
        """The trial failed and starts again (FailureConfig.max_failures)."""

    def on_trial_error(self, iteration: int, trials: List["Trial"], trial: "Trial", **info: Any) -> None:
        """The trial failed for good."""

    def on_checkpoint(self, iteration: int, trials: List["Trial"], trial: "Trial", checkpoint: Any,
                      **info: Any) -> None:
        """A checkpoint of the trial is stored (``checkpoint``: a Checkpoint)."""

    def on_experiment_end(self, trials: List["Trial"], **info: Any) -> None:
        """Once, after the last trial ended."""

    def get_state(self) -> Optional[Dict]:
        """Kept with the experiment; ``set_state`` gets it back on Tuner.restore."""
        return None

    def set_state(self, state: Dict) -> None:
        pass


class CallbackList(Callback):
    """Several callbacks as one, each hook called on each in order."""

    def __init__(self, callbacks: List[Callback]):
        self._callbacks = list(callbacks)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith(("on_", "setup")) and name in Callback.__dict__:
            callbacks = object.__getattribute__(self, "_callbacks")

            def each(*args: Any, **kwargs: Any) -> None:
                for c in callbacks:
                    getattr(c, name)(*args, **kwargs)
            return each
        return object.__getattribute__(self, name)

    def get_state(self) -> Optional[Dict]:
        return {i: c.get_state() for i, c in enumerate(self._callbacks)}

    def set_state(self, state: Dict) -> None:
        for i, c in enumerate(self._callbacks):
            if state and i in state and state[i] is not None:
                c.set_state(state[i])
