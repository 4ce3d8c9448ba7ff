"""libtune.tune.examples: where Ray's example scripts find each other. libtune ships
no examples; a script that says ``ray.tune.examples.mnist_pytorch.train_func`` (Ray's
examples do, as Ray ships them as a package) gets the module of that name from the
script's own folder or anywhere on sys.path, as ``from ray.tune.examples.X import``
becomes ``from X import`` (docs/ray-tune.md)."""

import importlib


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise AttributeError(f"libtune.tune.examples.{name}: libtune ships no examples; put {name}.py (Ray's, from "
                             f"ray/tune/examples/ of the ray wheel) beside your script or on PYTHONPATH") from None
    globals()[name] = module
    return module
