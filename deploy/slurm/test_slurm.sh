#!/usr/bin/env bash
# Tests deploy/slurm/libtune.sbatch with Debian's Slurm for real: slurmctld and two
# slurmd daemons, each in a network namespace of its own (its own host name and
# address, as separate machines), every node configured with 2 GPUs (device files
# Slurm hands out). A job asks for 2 nodes and 1 GPU on each; the batch script must
# start the head on the first node and a libtune node on both, each with the 1 GPU
# Slurm gave it (CUDA_VISIBLE_DEVICES honoured: 1 GPU each, not the 2 the machine has),
# run the tuning script to its end on them, and stop everything.
#
#   deploy/slurm/test_slurm.sh TUNE_PROGRAM TUNING_SCRIPT
#
# Needs root (namespaces, the daemons) and slurmctld, slurmd, sbatch: exits 77
# (skipped) without them. Traffic stays inside the namespaces.
set -euo pipefail

SKIP=77
tune=${1:?usage: test_slurm.sh TUNE_PROGRAM TUNING_SCRIPT}
script=${2:?usage: test_slurm.sh TUNE_PROGRAM TUNING_SCRIPT}
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "[slurm-test] $*"; }

[ "$(id -u)" -eq 0 ] || { say "skipped: needs root (network namespaces, Slurm's daemons)"; exit $SKIP; }
for p in slurmctld slurmd sbatch scontrol ip unshare; do
  command -v "$p" >/dev/null || { say "skipped: $p is missing (deploy/install-deps.sh installs Slurm)"; exit $SKIP; }
done

tag=lts$$
work=$(mktemp -d /tmp/libtune-slurm-XXXXXX)
chmod 711 "$work"  # a root node runs trials as nobody, in folders below it
chmod 755 "$work"
ctl=$tag-ctl
nodes=(n1 n2)
declare -A ip=([ctl]=10.77.0.1 [n1]=10.77.0.11 [n2]=10.77.0.12)
pids=()

cleanup() {
  set +e
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for ns in "$ctl" "$tag-n1" "$tag-n2"; do
    # Whatever is left in a namespace (a stuck job step) goes with it.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  if [ "${keep:-${LIBTUNE_KEEP:-0}}" != 1 ]; then rm -rf "$work"; else say "kept $work"; fi
}
trap cleanup EXIT

# --- the network: a bridge in the controller's namespace, a veth to each node ---
ip netns add "$ctl"
ip -n "$ctl" link add br0 type bridge
ip -n "$ctl" addr add "${ip[ctl]}/24" dev br0
ip -n "$ctl" link set br0 up
ip -n "$ctl" link set lo up
hosts="127.0.0.1 localhost
${ip[ctl]} ctl
${ip[n1]} n1
${ip[n2]} n2"
mkdir -p "/etc/netns/$ctl" && echo "$hosts" > "/etc/netns/$ctl/hosts"
for n in "${nodes[@]}"; do
  ns=$tag-$n
  ip netns add "$ns"
  ip link add "$tag$n" type veth peer name eth0 netns "$ns"
  ip link set "$tag$n" netns "$ctl"
  ip -n "$ctl" link set "$tag$n" master br0 up
  ip -n "$ns" addr add "${ip[$n]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  mkdir -p "/etc/netns/$ns" && echo "$hosts" > "/etc/netns/$ns/hosts"
done

# --- Slurm: two nodes with 2 GPUs each (device files), no accounting ---
mkdir -p "$work/state" "$work/dev"
for i in 0 1; do mknod "$work/dev/nvidia$i" c 1 3; done  # Slurm only needs distinct device files
cpus=$(nproc)
cat > "$work/slurm.conf" <<EOF
ClusterName=libtune-test
SlurmctldHost=ctl(${ip[ctl]})
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool-%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=n1 NodeAddr=${ip[n1]} CPUs=$cpus RealMemory=1000 Gres=gpu:2 State=UNKNOWN
NodeName=n2 NodeAddr=${ip[n2]} CPUs=$cpus RealMemory=1000 Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
echo "NodeName=n[1-2] Name=gpu File=$work/dev/nvidia[0-1]" > "$work/gres.conf"
# slurmd loads a cgroup plugin whatever the task plugin; nothing is constrained here.
cgroup=cgroup/v1
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && cgroup=cgroup/v2
printf 'CgroupPlugin=%s\nCgroupAutomount=no\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n' "$cgroup" > "$work/cgroup.conf"
mkdir -p "$work/spool-n1" "$work/spool-n2"
export SLURM_CONF=$work/slurm.conf

in_ns() { local ns=$1 host=$2; shift 2; ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$host" "$@"; }
in_ns "$ctl" ctl slurmctld -D -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
pids+=($!)
for n in "${nodes[@]}"; do
  in_ns "$tag-$n" "$n" slurmd -D -f "$SLURM_CONF" > "$work/slurmd-$n.out" 2>&1 &
  pids+=($!)
done
ctl_do() { ip netns exec "$ctl" "$@"; }
for _ in $(seq 1 60); do
  idle=$(ctl_do sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle' || true)
  [ "$idle" -ge 2 ] && break
  sleep 0.5
done
if [ "${idle:-0}" -lt 2 ]; then
  say "Slurm did not come up:"; ctl_do sinfo -N 2>&1 || true; tail -20 "$work"/slurm*.log "$work"/*.out 2>/dev/null
  exit 1
fi
say "Slurm is up: $(ctl_do sinfo -h -N -o '%N:%t:%G' | tr '\n' ' ')"

# --- the job: 2 nodes, 1 of each node's 2 GPUs ---
exp=$work/experiment
job=$(ctl_do sbatch --parsable --nodes=2 --gres=gpu:1 --cpus-per-task="$cpus" --chdir="$work" \
      --output="$work/job-%j.out" --export=ALL,LIBTUNE_TUNE="$tune",LIBTUNE_DASHBOARD=0 \
      "$here/libtune.sbatch" "$script" --samples 4 --epochs 2 --gpus-per-trial 0.5 --progress lines \
      --experiment-dir "$exp")
say "submitted job $job"
for _ in $(seq 1 600); do
  state=$(ctl_do scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
  sleep 0.5
done
out=$work/job-$job.out
say "job $job ended: ${state:-unknown}"
echo "----- job output -----"; cat "$out" 2>/dev/null; echo "----------------------"

failed=0
check() { if eval "$2"; then say "ok: $1"; else say "FAILED: $1"; failed=1; fi; }
check "the job completed with exit code 0" \
  "ctl_do scontrol show job $job | grep -q 'JobState=COMPLETED' && ctl_do scontrol show job $job | grep -q 'ExitCode=0:0'"
check "the head ran on the first node (n1)" "grep -q 'head on n1 (${ip[n1]}:6380)' '$out'"
check "a libtune node on each allocated node, each with the 1 GPU Slurm gave it" \
  "grep -q 'node on n1: CUDA_VISIBLE_DEVICES=0 -> 1 GPUs' $work/libtune-$job/node-n1.log &&
   grep -q 'node on n2: CUDA_VISIBLE_DEVICES=0 -> 1 GPUs' $work/libtune-$job/node-n2.log"
check "the cluster saw 2 nodes and 2 GPUs" "grep -q 'Nodes: 2 alive' '$out' && grep -Eq 'gpu +[0-9.]+ / 2' '$out'"
check "the tuning script ran every trial without an error" "grep '^{\"best_config\"' '$out' | grep '\"errors\":0' | grep -q '\"trials\":4'"
check "the nodes and the head stopped gracefully (SIGTERM, not killed)" \
  "grep -q 'leaving the cluster' $work/libtune-$job/node-n1.log && grep -q 'leaving the cluster' $work/libtune-$job/node-n2.log &&
   grep -q 'stopping (Terminated)' $work/libtune-$job/head.log && ! grep -q 'Killed' '$out'"
check "trials ran on both nodes" \
  "grep -q 'trial trial-[0-9]*@[0-9a-f]* started' $work/libtune-$job/node-n1.log &&
   grep -q 'trial trial-[0-9]*@[0-9a-f]* started' $work/libtune-$job/node-n2.log"
# Any process still running with this job's folder in its command line.
leftovers() {
  for f in /proc/[0-9]*/cmdline; do
    { tr '\0' ' ' < "$f"; } 2>/dev/null | grep -F -- "$work/libtune-$job" | grep -v -F "test_slurm" || true
  done
}
check "every libtune process stopped at the end" '[ -z "$(leftovers)" ]'

if [ $failed -ne 0 ]; then
  keep=1
  tail -30 "$work"/libtune-"$job"/*.log "$work"/slurmd-*.log 2>/dev/null
  exit 1
fi
say "passed"
