#!/bin/bash
#SBATCH -J strict
#SBATCH -t 5
#SBATCH -N 1
#SBATCH -n 1
# expect: CD
# expect-out: workdir ok
set -euo pipefail
cd "${SLURM_SUBMIT_DIR}"
TASK=${SLURM_ARRAY_TASK_ID:-0}
echo "task ${TASK} on ${SLURMD_NODENAME} (${SLURM_JOB_NUM_NODES} node, restarts ${SLURM_RESTART_COUNT})"
[ "$(pwd)" = "${SLURM_SUBMIT_DIR}" ] && echo "workdir ok"
