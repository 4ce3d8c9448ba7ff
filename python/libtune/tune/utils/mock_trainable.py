"""Ray's ``ray.tune.utils.mock_trainable``: MyTrainableClass, a Trainable whose curve is a
tanh of its steps (``width``, ``height`` in the config), for examples and tests."""

import json
import math
import os
import time

from ..trainable import Trainable

MOCK_ERROR_KEY = "mock_error"
__all__ = ["MyTrainableClass", "MOCK_ERROR_KEY"]


class MyTrainableClass(Trainable):
    def setup(self, config):
        self._sleep_time = config.get("sleep", 0)
        self._mock_error = config.get(MOCK_ERROR_KEY, False)
        self._persistent_error = config.get("persistent_error", False)
        self.timestep = 0
        self.restored = False

    def step(self):
        if self._mock_error and self.timestep > 0 and (self._persistent_error or not self.restored):
            raise RuntimeError(f"Failing on purpose! self.timestep={self.timestep}")
        if self._sleep_time > 0:
            time.sleep(self._sleep_time)
        self.timestep += 1
        v = math.tanh(float(self.timestep) / self.config.get("width", 1)) * self.config.get("height", 1)
        return {"episode_reward_mean": v}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "checkpoint"), "w") as f:
            f.write(json.dumps({"timestep": self.timestep}))

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
            self.timestep = json.loads(f.read())["timestep"]
        self.restored = True
