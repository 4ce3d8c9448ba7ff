"""Where the ``tune`` program (libtune's CLI and engine) is.

``tune_binary()`` looks, in this order, at:

1. ``$LIBTUNE_TUNE``, when set: it must be an executable file (an error naming the
   variable otherwise, never a silent fall-back to another ``tune``);
2. ``libtune/bin/tune`` beside this package, where the wheel puts it
   (``pip install libtune-*.whl`` or ``pip install ./python``);
3. ``tune`` on the ``PATH`` (e.g. Debian's libtune-tools, or ``cmake --install``),
   leaving out the wheel's ``tune`` console script, which runs this very lookup;

and raises FileNotFoundError, saying what to do, when none is there (a checkout used
through ``PYTHONPATH=python``, with no CLI built).
"""

import os
import shutil

__all__ = ["tune_binary"]

_PACKAGED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tune")


def _executable_file(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _is_console_script(path):
    """True for the `tune` script pip writes for the wheel (it calls libtune._cli)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and b"libtune._cli" in head


def _on_path():
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which("tune", path=folder or os.curdir)
        if found and not _is_console_script(found):
            return os.path.abspath(found)
    return None


def tune_binary():
    """The path of the ``tune`` program to run (see the module's documentation)."""
    given = os.environ.get("LIBTUNE_TUNE")
    if given:
        if not os.path.exists(given):
            raise FileNotFoundError(f"LIBTUNE_TUNE={given}: no such file (set LIBTUNE_TUNE to the tune "
                                    "program, e.g. build/nodes/tune, or unset it to use the installed one)")
        if not _executable_file(given):
            raise PermissionError(f"LIBTUNE_TUNE={given}: not an executable file (set LIBTUNE_TUNE to the "
                                  "tune program, e.g. build/nodes/tune, or unset it to use the installed one)")
        return os.path.abspath(given)
    if _executable_file(_PACKAGED):
        return _PACKAGED
    found = _on_path()
    if found:
        return found
    raise FileNotFoundError(
        "libtune's tune program was not found: not in LIBTUNE_TUNE, not in the package "
        f"({_PACKAGED}), not on the PATH. Install the wheel (python/build-wheel.sh, then "
        "pip install dist/libtune-*.whl; or pip install ./python), or build the CLI "
        "(cmake --build build --target tune) and set LIBTUNE_TUNE=$PWD/build/nodes/tune")
