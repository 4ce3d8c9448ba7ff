# A gang's worker for the tests (docs/workers.md), knowing nothing of libtune's Python
# module: it appends what it was given (its rank, its peers, where they meet) to the
# record file, meets its peers at MASTER_ADDR:MASTER_PORT (rank 0 listens, the others
# connect: a rendezvous of the gang's own, as torch.distributed's store does), says it
# joined, and reports a metric that names its rank. --fail-rank R: that rank exits 3
# after its results (rank 0 sleeps --leader-sleep seconds first).
import argparse, json, os, socket, sys, time

p = argparse.ArgumentParser()
p.add_argument("--record", required=True)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--leader-sleep", type=float, default=0)
p.add_argument("--no-join-rank", type=int, default=-1)
a, _ = p.parse_known_args()
env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
                                      "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TUNE_TRIAL_ID", "TUNE_TRIAL_DIR")}
env["pid"] = os.getpid()
rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
with open(a.record, "a") as f:
    f.write(json.dumps(env) + "\n")
if rank == a.no_join_rank:
    time.sleep(3600)
# The rendezvous: every rank's connection reaches rank 0's listener.
if rank == 0:
    s = socket.create_server((env["MASTER_ADDR"], int(env["MASTER_PORT"])))
    peers = [s.accept()[0] for _ in range(world - 1)]
    for c in peers: c.sendall(b"go")
else:
    for _ in range(200):
        try:
            c = socket.create_connection((env["MASTER_ADDR"], int(env["MASTER_PORT"])), timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    assert c.recv(2) == b"go"
out = os.fdopen(int(os.environ["TUNE_REPORT_FD"]), "w")
out.write(json.dumps({"type": "joined"}) + "\n")
out.flush()
for i in range(3):
    out.write(json.dumps({"type": "result", "iteration": i + 1, "metrics": {"val_acc": 0.1 * i, "rank": rank}}) + "\n")
    out.flush()
if rank == 0:
    time.sleep(a.leader_sleep)
if rank == a.fail_rank:
    print("rank %d fails on purpose" % rank, file=sys.stderr)
    sys.exit(3)
