"""Ray Tune's ``ray.tune.result``: the names of a result's fields. A callback that sets
``result[SHOULD_CHECKPOINT] = True`` in ``on_trial_result`` asks that trial for a
checkpoint now (a Trainable class makes one after its current step)."""

DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"
HOSTNAME = "hostname"
TRIAL_ID = "trial_id"
EXPERIMENT_TAG = "experiment_tag"
NODE_IP = "node_ip"
PID = "pid"
DEFAULT_METRIC = "_metric"
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
MEAN_ACCURACY = "mean_accuracy"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TRAINING_ITERATION = "training_iteration"
TIMESTAMP = "timestamp"
CONFIG_PREFIX = "config"

__all__ = [name for name in dir() if name.isupper()]
