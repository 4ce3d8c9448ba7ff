#!/usr/bin/env bash
# On the GPU machine: the PyTorch example (examples/pytorch) tuned with `tune run` on an
# embedded cluster over this machine's card(s), 0.25 GPU per trial, then what each trial
# saw and used: CUDA's device count inside it, its card by UUID, the GPU memory the
# node's audit measured, where its start-up went (import torch, CUDA context, data, the
# first epoch), the test accuracy and wall time; then the GPU isolation tests and the
# program tests on this machine.
#
#   bench/gpu_pytorch_check.sh BUILD_DIR OUT_DIR     (from the repository's root)
set -uo pipefail
build=${1:?}; out=${2:?}
mkdir -p "$out"
nvidia-smi -L | tee "$out/nvidia-smi.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' | tee -a "$out/nvidia-smi.txt"
exp=/tmp/tune-pytorch-exp; rm -rf "$exp"
start=$(date +%s.%N)
"$build/nodes/tune" run examples/pytorch/experiment.yaml --experiment-dir "$exp" --progress lines \
  > "$out/tune-run.json" 2> "$out/tune-run.log"
rc=$?
end=$(date +%s.%N)
echo "tune run exit $rc, $(python3 -c "print(round($end - $start, 1))") s"; tail -1 "$out/tune-run.json"
cp "$exp/trials.json" "$out/trials.json" 2>/dev/null
python3 - "$exp" "$out/tune-run.json" <<'PY' | tee "$out/summary.txt"
import csv, json, sqlite3, statistics, sys
exp, summary = sys.argv[1], json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
trials = json.load(open(exp + "/trials.json"))
rows = list(csv.DictReader(open(exp + "/results.csv")))
db = sqlite3.connect(exp + "/experiment.db")
created = dict(db.execute("SELECT id, created FROM trials"))
first = dict(db.execute("SELECT trial, min(time) FROM results GROUP BY trial"))
def num(r, k):
    try: return float(r[k])
    except (KeyError, ValueError): return None
startup = {k: [] for k in ("interpreter_s", "import_torch_s", "cuda_context_s", "data_s", "first_epoch_s")}
before_process = []  # the trial's start (the controller's) to its process's start: libtune's part
devices, to_first = [], []
print("trial        state       uuid of its card                          GPU peak  start->1st result  epochs")
for t in trials:
    mine = [r for r in rows if r["trial"] == t["id"]]
    one = mine[0] if mine else {}
    for k in startup:
        v = num(one, k)
        if v is not None: startup[k].append(v)
    if num(one, "devices") is not None: devices.append(int(num(one, "devices")))
    lat = first[t["id"]] - created[t["id"]] if t["id"] in first else None
    if lat is not None: to_first.append(lat)
    if num(one, "process_started_at") is not None: before_process.append(num(one, "process_started_at") - created[t["id"]])
    uuid = ",".join(g["uuid"] for g in t["info"].get("gpus", []))
    peak = t["info"].get("gpu_memory_peak", 0) / 2**20
    print(f'{t["id"]}  {t["state"]:10}  {uuid:40}  {peak:6.0f} MiB  {lat or 0:8.2f} s  {len(mine)}')
best = summary.get("best_trial")
test_acc = [num(r, "test_acc") for r in rows if r["trial"] == best and num(r, "test_acc") is not None]
print("devices seen inside the trials:", sorted(set(devices)), "(want [1])")
print("start-up, medians over trials (s):", {k: round(statistics.median(v), 3) for k, v in startup.items() if v})
print("start request -> first result, median (s):", round(statistics.median(to_first), 2) if to_first else None)
print("start request -> its process started (placement, working directory, spawn), median (s):",
      round(statistics.median(before_process), 3) if before_process else None, "max", round(max(before_process), 3) if before_process else None)
print("best:", best, "val_acc", summary.get("best_value"), "test_acc", test_acc[-1] if test_acc else None,
      "trials", summary.get("trials"), "errors", summary.get("errors"), "wall_s", round(summary.get("wall_s", 0), 1))
peaks = [t["info"].get("gpu_memory_peak", 0) for t in trials]
print("GPU memory peaks recorded for", sum(1 for p in peaks if p > 0), "of", len(trials), "trials; max",
      round(max(peaks) / 2**20), "MiB")
print("CHECK", "ok" if set(devices) == {1} and all(p > 0 for p in peaks) and summary.get("errors") == 0 else "FAILED")
PY
# Warm interpreters against fresh ones for PyTorch trials: 8 trials of 2 epochs each way.
for how in ${PAIRS:-fresh warm}; do
  e=/tmp/tune-pytorch-$how; rm -rf "$e"
  extra=(); [ $how = fresh ] && extra=(--env LIBTUNE_FRESH_PYTHON=1)
  "$build/nodes/tune" run examples/pytorch/experiment.yaml --samples 8 --experiment-dir "$e" --progress none \
    --space '{"lr": {"loguniform": [0.01, 0.1]}, "momentum": 0.9, "weight_decay": 0.0001, "batch_size": 128, "model": "cnn", "epochs": 2}' \
    "${extra[@]}" > /dev/null 2>&1
  python3 - "$e" "$how" <<'PY' | tee -a "$out/summary.txt"
import csv, sqlite3, statistics, sys
exp, how = sys.argv[1], sys.argv[2]
db = sqlite3.connect(exp + "/experiment.db")
created = dict(db.execute("SELECT id, created FROM trials"))
first = dict(db.execute("SELECT trial, min(time) FROM results GROUP BY trial"))
rows = {}
for r in csv.DictReader(open(exp + "/results.csv")):
    rows.setdefault(r["trial"], r)
def med(k): return round(statistics.median(float(r[k]) for r in rows.values() if r.get(k)), 3)
lat = [first[t] - created[t] for t in first]
before = [float(r["process_started_at"]) - created[t] for t, r in rows.items() if r.get("process_started_at")]
print(f"{how}: {len(first)} trials; start request -> first result {statistics.median(lat):.2f} s; -> process started "
      f"{statistics.median(before):.3f} s; interpreter {med('interpreter_s')} s, import torch {med('import_torch_s')} s, "
      f"CUDA context {med('cuda_context_s')} s, data {med('data_s')} s, first epoch {med('first_epoch_s')} s (medians)")
PY
done
# The same question without libtune: import torch and a CUDA context in a fork of a warm
# interpreter against an exec'd one, alternately.
python3 bench/python/torch_start.py 8 2>/dev/null | tail -1 | tee "$out/torch_start.json"
"$build/tests/gpu_isolation_test" > "$out/gpu_isolation_test.log" 2>&1; echo "gpu_isolation_test exit $?"; tail -3 "$out/gpu_isolation_test.log"
"$build/libtune/python_spawners_test" > "$out/python_spawners_test.log" 2>&1; echo "python_spawners_test exit $?"; tail -2 "$out/python_spawners_test.log"
[ "${PROGRAM_TEST:-1}" = 1 ] && { "$build/tests/program_test" > "$out/program_test.log" 2>&1; echo "program_test exit $?"; tail -3 "$out/program_test.log"; }
"$build/bench/bench_start" 2>/dev/null | tail -1 | tee "$out/bench_start.json"
[ "${BENCH_OVERHEAD:-1}" = 1 ] && "$build/bench/bench_overhead" --both 2>&1 | tail -1 | tee "$out/bench_overhead.json"
