"""The wheel's ``tune`` command: runs libtune's tune program (libtune/bin/tune).

pip writes a ``tune`` script into the environment's bin/ that calls ``main()``, which
replaces this Python process with the program (``os.execv``): its exit status, signals
and terminal are the program's own. Which program: ``libtune._engine_path.tune_binary()``
($LIBTUNE_TUNE, else the wheel's, else one on the PATH).
"""

import os
import sys

from libtune._engine_path import tune_binary


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        binary = tune_binary()
    except OSError as e:
        print(f"tune: {e}", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(binary, [binary] + args)
    except OSError as e:
        print(f"tune: cannot run {binary}: {e}", file=sys.stderr)
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
