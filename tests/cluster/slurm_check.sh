#!/usr/bin/env bash
# Prove the workflow runs on a real SLURM scheduler: a single-node cluster on localhost (as root,
# no systemd, its own configuration and state under a temporary folder), the workflow's tiny target
# set and a small design-space sweep (`snakemake dse`'s chunks, one SLURM job each, and their merge on the
# submitting host) submitted with `snakemake --profile profiles/slurm` from the golden set's acceptance
# models, outputs compared byte for byte with a local `--cores 2` run. Every daemon started here is stopped
# by pid on exit, success or failure.
#
#   bash tests/cluster/slurm_check.sh            (from the repository root, in the project's venv)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
TARGETS=(figures/fig06_roofline.pdf figures/fig06_roofline.png results/figures/fig06_roofline.csv
         figures/validation_gpu.pdf figures/validation_gpu.png results/figures/validation_gpu.csv)
WORK=$(mktemp -d /tmp/adsl-slurm.XXXXXX)
CONF=/etc/slurm/slurm.conf
STARTED_PIDS=()
BACKUP=""

log() { printf '[slurm-check %s] %s\n' "$(date +%T)" "$*"; }

cleanup() {
  local rc=$?
  set +e +o pipefail  # clean up everything, whatever fails on the way
  if [ $rc -ne 0 ]; then
    log "FAILED (rc=$rc); SLURM logs follow"
    for f in "$WORK"/slurmctld.log "$WORK"/slurmd.log; do [ -f "$f" ] && { echo "== $f"; tail -n 60 "$f"; }; done
    find "$WORK/slurm/.snakemake/slurm_logs" -name '*.log' 2>/dev/null | head -n 5 | while read -r f; do
      echo "== $f"; tail -n 40 "$f"; done
  fi
  scancel --user=root >/dev/null 2>&1 || true
  for pid in "${STARTED_PIDS[@]}"; do
    kill "$pid" >/dev/null 2>&1 || true
  done
  for pid in "${STARTED_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" >/dev/null 2>&1 || break; sleep 0.1; done
    kill -9 "$pid" >/dev/null 2>&1 || true
  done
  if [ -n "$BACKUP" ]; then mv -f "$BACKUP" "$CONF"; else rm -f "$CONF"; fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  log "installing Debian's slurm-wlm and munge"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
"$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null || "$PY" -m pip install -q -e "$REPO[slurm]"

# munge: its key and run directory belong to the munge user; as root `munged --force` starts.
[ -f /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null || \
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/lib/munge /var/log/munge; chown munge:munge /run/munge /var/lib/munge /var/log/munge
munged --force --pid-file="$WORK/munged.pid" --socket="/run/munge/munge.socket.2"
STARTED_PIDS+=("$(cat "$WORK/munged.pid")")

mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))
mkdir -p "$WORK/state" "$WORK/spool" /etc/slurm
[ -f "$CONF" ] && { BACKUP="$WORK/slurm.conf.orig"; cp -p "$CONF" "$BACKUP"; }
# srun inside an allocation only finds its configuration at /etc/slurm/slurm.conf.
cat > "$CONF" <<CONF
ClusterName=adsl-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
NodeName=localhost CPUs=2 RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -f "$CONF"
for _ in $(seq 50); do [ -s "$WORK/slurmctld.pid" ] && break; sleep 0.2; done
STARTED_PIDS+=("$(cat "$WORK/slurmctld.pid")")
slurmd -f "$CONF" -N localhost
for _ in $(seq 50); do [ -s "$WORK/slurmd.pid" ] && break; sleep 0.2; done
STARTED_PIDS+=("$(cat "$WORK/slurmd.pid")")
for _ in $(seq 60); do sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle' && break; sleep 1; done
sinfo
log "cluster up (pids ${STARTED_PIDS[*]})"

# One run on each side: the tiny figure targets and a small design-space sweep (3 chunks of one
# configuration), from the golden set's fitted acceptance models (so no fit runs: the fits are minutes of
# CPU, and the SLURM round trips, not their arithmetic, are what this checks). The chunks run as SLURM jobs
# beside the table and figure group jobs, the merge on the submitting host; every output must equal the
# local run's to the byte.
cat > "$WORK/dse.yaml" <<YAML
dse:
  sweep: slurm-check
  sweeps:
    slurm-check:
      sampling: grid
      chunk_points: 1
      systems: [GPU-AD, PIM-SD]
      gain: [PIM-SD, GPU-AD]
      base: {pair: OPT-66B, batch: 4, seq_len: 256, draft_length: 4}
      simulation: {replicas: 2, batching: {requests_per_slot: 3}}
      axes: {pim_stacks_per_gpu: {values: [4, 5, 6]}}
      winner_axes: [pim_stacks_per_gpu, pim_stacks_per_gpu]
YAML
TARGETS+=(results/dse/points.parquet)
for run in local slurm; do
  mkdir -p "$WORK/$run/results"
  cp -r "$REPO/tests/sim/golden/results/acceptance" "$WORK/$run/results/"
  # copies take the time of copying, in any order: date them in the DAG's order (the measured fits, then
  # the calibrated pairs, then tau), or Snakemake reruns what a later-copied input seems to have updated
  acc="$WORK/$run/results/acceptance"
  find "$acc/measured" -type f -exec touch -d '-2 minutes' {} +
  find "$acc" -mindepth 1 -type d ! -name measured -exec sh -c 'touch -d "-1 minute" "$1"/*' _ {} \;
  touch "$acc/tau.csv"
done
log "local run"
(cd "$WORK/local" && "$PY" -m snakemake -s "$REPO/Snakefile" --cores 2 "${TARGETS[@]}" \
   --configfile "$REPO/config/config.yaml" "$WORK/dse.yaml" >"$WORK/local.log" 2>&1) \
  || { tail -n 40 "$WORK/local.log"; exit 1; }
log "SLURM run"
start=$(date +%s)
(cd "$WORK/slurm" && SLURM_ACCOUNT="" SLURM_PARTITION=debug "$PY" -m snakemake -s "$REPO/Snakefile" \
   --profile "$REPO/profiles/slurm" --slurm-no-account --slurm-status-command squeue \
   --slurm-init-seconds-before-status-checks 2 "${TARGETS[@]}" \
   --configfile "$REPO/config/config.yaml" "$WORK/dse.yaml" >"$WORK/slurm.log" 2>&1) \
  || { tail -n 80 "$WORK/slurm.log"; exit 1; }
log "SLURM run took $(( $(date +%s) - start )) s; SLURM jobs submitted: $(grep -c 'submitted with SLURM jobid' "$WORK/slurm.log" || true)"
chunk_jobs=$(grep -c 'rule dse_chunk' "$WORK/slurm.log" || true)
[ "$chunk_jobs" -eq 3 ] || { log "expected 3 dse_chunk jobs, saw $chunk_jobs"; exit 1; }
for f in "${TARGETS[@]}"; do
  cmp "$WORK/local/$f" "$WORK/slurm/$f" || { log "differs: $f"; tail -n 30 "$WORK/slurm.log"; exit 1; }
done
log "PASS: ${#TARGETS[@]} outputs (figures, tables and the sweep's merged table from $chunk_jobs chunk jobs) byte-identical between SLURM and local runs"
