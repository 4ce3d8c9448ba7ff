"""A Lightning script and a Hugging Face Trainer script (examples/integrations/) tuned by
`tune run` through their one callback each, ASHA stopping some early: every trial
reports its metric, its checkpoints are the framework's own files, its folder has
TensorBoard's events. Skipped (77) where the Python has neither torch with lightning
nor torch with transformers (CI); run on the GPU machine with --gpu 0.25.

Usage: python frameworks_test.py --tune PATH [--python PY] [--gpu SHARE] [--out FILE] [--env K=V] [--only CASE]"""

import argparse
import glob
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "integrations")
CASES = {
    "lightning": ("lightning_train.py", "val_acc", "lightning", "checkpoint"),
    "hf_trainer": ("hf_trainer.py", "eval_accuracy", "transformers", "model.safetensors"),
}


def has(python, module):
    return subprocess.run([python, "-c", f"import torch, {module}"], capture_output=True).returncode == 0


def run_case(args, name, folder):
    script, metric, _, ckpt_file = CASES[name]
    epochs = 6 if args.gpu else 3
    spec = {"name": name, "command": [args.python, script], "working_dir": os.path.abspath(EXAMPLES),
            "metric": metric, "mode": "max", "num_samples": 8,
            "space": {"lr": {"loguniform": [0.002, 0.5]}, "hidden": {"choice": [32, 64, 128]}, "batch_size": 256,
                      "epochs": epochs, "limit": 0 if args.gpu else 4000},
            "resources_per_trial": {"gpu": args.gpu, "cpu": 1} if args.gpu else {"cpu": 1},
            "scheduler": {"type": "asha", "max_t": epochs, "grace_period": 1, "reduction_factor": 2},
            "experiment_dir": os.path.join(folder, name), "progress": "lines"}
    spec["env"] = {kv.split("=", 1)[0]: (kv.split("=", 1)[1] if "=" in kv else None) for kv in args.env}
    if os.environ.get("TUNE_FASHION_MNIST_DIR"):
        spec["env"]["TUNE_FASHION_MNIST_DIR"] = None
    path = os.path.join(folder, name + ".yaml")
    with open(path, "w") as f:
        json.dump(spec, f)
    proc = subprocess.run([args.tune, "run", path], capture_output=True, text=True, timeout=1200)
    exp = spec["experiment_dir"]
    if proc.returncode != 0:  # what its trials said, kept beside --out
        for err in sorted(glob.glob(os.path.join(exp, "trials", "*", "stderr")))[:2]:
            with open(err, errors="replace") as f:
                print(f"--- {err}\n{f.read()[-6000:]}", file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-4000:]
    db = sqlite3.connect(os.path.join(exp, "experiment.db"))
    trials = dict(db.execute("SELECT id, state FROM trials"))
    last = dict(db.execute("SELECT trial, MAX(iteration) FROM results GROUP BY trial"))
    reported = {t for (t,) in db.execute("SELECT DISTINCT trial FROM results WHERE json_extract(metrics, ?) IS NOT NULL",
                                         (f"$.{metric}",))}
    stops = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'stop'").fetchone()[0]
    db.close()
    assert set(trials.values()) == {"terminated"}, trials
    assert reported == set(trials), (reported, trials)
    early = sorted(t for t, it in last.items() if it < epochs)
    assert early, f"ASHA stopped no trial early: {last}"
    copies = glob.glob(os.path.join(exp, "checkpoints", "*", "*", ckpt_file))
    assert copies, f"no {ckpt_file} in {exp}/checkpoints"
    events = glob.glob(os.path.join(exp, "trials", "*", "events.out.tfevents.*"))
    assert len({os.path.dirname(e) for e in events}) == len(trials), events
    summary = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    return {"trials": len(trials), "stopped_early": early, "iterations": last, "stop_events": stops,
            "checkpoint_copies": len(copies), "best_value": summary["best_value"], "wall_s": summary["wall_s"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tune", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--gpu", type=float, default=0)
    p.add_argument("--out")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the trials, or NAME: this process's value (repeatable)")
    p.add_argument("--only", choices=sorted(CASES), help="one case")
    args = p.parse_args()
    todo = [name for name, case in CASES.items() if has(args.python, case[2]) and args.only in (None, name)]
    if not todo:
        print(f"frameworks_test: {args.python} has neither torch with lightning nor torch with transformers: skipped")
        return 77
    out, failed = {}, []
    with tempfile.TemporaryDirectory(prefix="frameworks_test_") as folder:
        for name in todo:
            try:
                out[name] = run_case(args, name, folder)
            except AssertionError as e:
                failed.append(name)
                out[name] = {"failed": str(e)[-2000:]}
            print(name, json.dumps(out[name]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    skipped = sorted(n for n in set(CASES) - set(todo) if args.only in (None, n))
    if skipped:
        print("frameworks_test: not here:", ", ".join(skipped))
    if failed:
        print("frameworks_test: failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
