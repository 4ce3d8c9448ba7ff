"""Where people look at their runs (docs/tracking.md): the trackers' bridge that libtune's
engine runs for MLflow and Weights & Biases (_bridge), and, in the modules of their
names, the callbacks and helpers of Ray Tune's integrations."""
