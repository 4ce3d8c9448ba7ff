"""``libtune.init(...)``: Ray's ``ray.init`` for the driver API. It says which cluster
the experiments of this process run on; nothing starts until ``fit()``:

- ``init()`` / ``init(address="auto")``: the cluster running on this machine (``tune
  start``), else an embedded one, started by each fit() and ended with it (the default);
- ``init(address="HOST:PORT")``: that cluster (``tune start --head``), with the head's
  token from ``~/.tune/token`` or ``token_file=``; a cluster that is not there is
  fit()'s error, naming the address;
- ``init(num_cpus=N, num_gpus=N)`` or ``init(address="local")``: an embedded cluster of
  its own, with those resources (``tune run --local``).
"""

import numbers

__all__ = ["init", "shutdown", "is_initialized", "flags"]

_state = None

_NO_EFFECT = {
    "ignore_reinit_error": "libtune's init can always be called again",
    "configure_logging": "libtune's progress goes to standard error",
    "logging_level": "libtune's progress goes to standard error",
    "namespace": "libtune has no namespaces",
}


def init(address=None, *, num_cpus=None, num_gpus=None, include_dashboard=None, dashboard_port=None,
         runtime_env=None, token_file=None, log_to_driver=True, **kwargs):
    """Ray's ``ray.init``: which cluster fit() uses (see the module). Arguments libtune
    does not have are errors naming what to use instead, except those without effect
    in libtune (ignore_reinit_error, logging_level, ...). log_to_driver (as Ray's): every
    trial's standard output and error on this program's standard error, each line
    prefixed with "(trial-00001 pid=N) "; False keeps them to the trial (the end of a
    failed trial's standard error is kept in <experiment>/trials/<id>/stderr either way)."""
    global _state
    for key, value in kwargs.items():
        if key in _NO_EFFECT:
            continue
        if key in ("object_store_memory", "_memory", "resources", "local_mode", "_temp_dir", "_node_ip_address",
                   "_system_config", "job_config", "storage"):
            raise TypeError(f"libtune.init({key}=...) is not supported: libtune has no object store, custom node "
                            f"resources are given to `tune start --resources`, and trials always run as their own "
                            f"processes")
        raise TypeError(f"libtune.init() got an unexpected argument {key!r}: it takes address, num_cpus, num_gpus, "
                        f"include_dashboard, dashboard_port, runtime_env, token_file")
    if not isinstance(log_to_driver, bool):
        raise TypeError(f"libtune.init(log_to_driver={log_to_driver!r}): give True or False")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"libtune.init(address=...): give 'HOST:PORT', 'auto' or 'local', not {address!r}")
    if address and address.startswith(("ray://", "http://", "https://")):
        raise ValueError(f"libtune.init(address={address!r}): give the head's HOST:PORT (what `tune start --head` "
                         f"printed), without a scheme")
    local = address == "local"
    for key, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("dashboard_port", dashboard_port)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
                raise ValueError(f"libtune.init({key}={value!r}): give a number >= 0")
            if key != "num_cpus" and value != int(value):
                raise ValueError(f"libtune.init({key}={value!r}): give a whole number (a share of a card is a trial's "
                                 f"request: with_resources(fn, {{'gpu': 0.25}}))")
            local = True
    if include_dashboard and dashboard_port is None:
        dashboard_port = 8265
        local = True
    if local and address not in (None, "auto", "local"):
        raise ValueError(f"libtune.init: num_cpus, num_gpus and the dashboard are for an embedded cluster; the "
                         f"cluster at {address} has its own (tune start's options)")
    env_vars = {}
    if runtime_env:
        if not isinstance(runtime_env, dict) or set(runtime_env) - {"env_vars"}:
            raise ValueError("libtune.init(runtime_env=...): only {'env_vars': {...}} is supported; the trials run "
                             "with the driver's interpreter and its packages, and their code is pickled to them")
        env_vars = dict(runtime_env.get("env_vars") or {})
    if token_file is not None and (local or address in (None, "auto", "local")):
        raise ValueError("libtune.init(token_file=...): the token is for a cluster at an address; give address= too")
    _state = {"address": None if address in (None, "auto", "local") else address, "local": local,
              "token_file": None if token_file is None else str(token_file),
              "num_cpus": num_cpus, "num_gpus": num_gpus, "dashboard_port": dashboard_port, "env_vars": env_vars,
              "log_to_driver": log_to_driver}
    return _state


def shutdown():
    """Forgets init()'s choice (embedded clusters end with their fit() anyway)."""
    global _state
    _state = None


def is_initialized():
    return _state is not None


def env_vars():
    return dict(_state["env_vars"]) if _state else {}


def log_to_driver():
    """Whether trials' output comes to this program's standard error (init's log_to_driver)."""
    return _state["log_to_driver"] if _state else True


def describe():
    """init()'s call, for errors ("" without one)."""
    if not _state:
        return ""
    if _state["address"]:
        return f"libtune.init(address={_state['address']!r})"
    return ""


def flags():
    """The `tune run` flags for init()'s choice."""
    if not _state:
        return []
    out = []
    if _state["address"]:
        out += ["--address", _state["address"]]
        if _state["token_file"]:
            out += ["--token-file", _state["token_file"]]
    elif _state["local"]:
        out += ["--local"]
        if _state["num_cpus"] is not None:
            out += ["--num-cpus", str(_state["num_cpus"])]
        if _state["num_gpus"] is not None:
            out += ["--num-gpus", str(int(_state["num_gpus"]))]
        if _state["dashboard_port"] is not None:
            out += ["--dashboard-port", str(int(_state["dashboard_port"]))]
    return out
