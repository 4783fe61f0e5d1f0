#!/bin/bash
#SBATCH --job-name=big-train
#SBATCH --time=00:30:00
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH --gres=gpu:1
#SBATCH --output=big-train-%j.out
#SBATCH --error=big-train-%j.err
#
# expect: CD
# expect-log: big-train-%j.out
# expect-out: eval loss
#
# ===========================================================================================
#  Lab training launcher (v3).  Maintained by the group; copy it, do not edit it in place.
#
#  What it does:
#    1. prints where and with what it runs (for the logbook),
#    2. writes the run's config next to its outputs,
#    3. trains (a stand-in here: a few steps of a toy loop), checkpointing every N steps,
#    4. evaluates the last checkpoint and appends a line to results.tsv.
#
#  Conventions:
#    - outputs go to runs/<job name>-<job id>/
#    - every run writes config.json, train.log, metrics.tsv
#    - exit code 0 only when evaluation succeeded
#
#  Environment it reads (all optional):
#    EPOCHS        number of epochs (default 3)
#    LR            learning rate (default 3e-4)
#    BATCH_SIZE    batch size (default 32)
#    SEED          random seed (default 0)
#
#  History:
#    v1  first version, one GPU, no checkpoints
#    v2  checkpoints every epoch, results.tsv
#    v3  config.json, metrics.tsv, stricter error handling (set -euo pipefail)
# ===========================================================================================

set -euo pipefail

EPOCHS=${EPOCHS:-3}
LR=${LR:-3e-4}
BATCH_SIZE=${BATCH_SIZE:-32}
SEED=${SEED:-0}
RUN_DIR="${SLURM_SUBMIT_DIR}/runs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}"

log() {
    # one timestamped line per event, to the job's output and the run's own log
    local msg="$*"
    printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "${SLURM_JOB_ID}" "$msg" | tee -a "${RUN_DIR}/train.log"
}

die() {
    log "ERROR: $*"
    exit 1
}

print_banner() {
    log "job ${SLURM_JOB_ID} (${SLURM_JOB_NAME}) on ${SLURM_JOB_NODELIST:-unknown}"
    log "cpus per task: ${SLURM_CPUS_PER_TASK:-1}, GPUs: ${CUDA_VISIBLE_DEVICES:-none}"
    log "epochs=${EPOCHS} lr=${LR} batch=${BATCH_SIZE} seed=${SEED}"
}

write_config() {
    cat > "${RUN_DIR}/config.json" <<JSON
{
  "job_id": "${SLURM_JOB_ID}",
  "job_name": "${SLURM_JOB_NAME}",
  "epochs": ${EPOCHS},
  "lr": ${LR},
  "batch_size": ${BATCH_SIZE},
  "seed": ${SEED}
}
JSON
}

train() {
    srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_PER_TASK}" python3 - "${RUN_DIR}" "${EPOCHS}" <<'PY'
import json, os, random, sys
run_dir, epochs = sys.argv[1], int(sys.argv[2])
cfg = json.load(open(os.path.join(run_dir, "config.json")))
random.seed(cfg["seed"])
loss = 2.0
with open(os.path.join(run_dir, "metrics.tsv"), "w") as m:
    m.write("epoch\tloss\n")
    for epoch in range(epochs):
        loss *= 0.7 + random.random() * 0.1
        m.write(f"{epoch}\t{loss:.4f}\n")
        with open(os.path.join(run_dir, f"ckpt-{epoch}.txt"), "w") as c:
            c.write(f"{loss}\n")
print(f"trained {epochs} epochs, final loss {loss:.4f}")
PY
}

evaluate() {
    local last
    last=$(ls "${RUN_DIR}"/ckpt-*.txt | sort -V | tail -n 1) || die "no checkpoint written"
    log "evaluating ${last##*/}"
    python3 -c "print('eval loss', round(float(open('${last}').read()), 4))"
    printf '%s\t%s\t%s\n' "${SLURM_JOB_ID}" "${SLURM_JOB_NAME}" "$(cat "${last}")" >> "${SLURM_SUBMIT_DIR}/results.tsv"
}

cleanup() {
    # keep only the last two checkpoints
    ls "${RUN_DIR}"/ckpt-*.txt 2>/dev/null | sort -V | head -n -2 | xargs -r rm -f
}
trap cleanup EXIT

mkdir -p "${RUN_DIR}" || die "cannot create ${RUN_DIR}"
print_banner
write_config
train
evaluate
log "done"
