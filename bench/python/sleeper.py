# bench_overhead's and bench_start's Python trial: the C++ sleeper's workload (`reports`
# results, each after `sleep_ms` of sleep standing in for work done elsewhere).
import time

import libtune

cfg = libtune.config()
pause = cfg["sleep_ms"] / 1000.0
for i in range(1, cfg["reports"] + 1):
    if pause:
        time.sleep(pause)
    if not libtune.report(score=float(i)):
        break
