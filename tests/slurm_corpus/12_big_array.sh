#!/bin/bash
#SBATCH --job-name=grid
#SBATCH --array=1-4%2
#SBATCH --time=00:20:00
#SBATCH --cpus-per-task=1
#SBATCH --mem=512M
#SBATCH --output=grid_%A_%a.out
#
# expect: CD
# expect-tasks: 4
# expect-out: grid point
# expect-log: grid_%A_%a.out
#
# ===========================================================================================
#  Hyper-parameter grid over learning rate x weight decay, one array task per grid point.
#
#  The grid (one line per task, 1-based; line N is task N):
#     lr       wd
#     1e-3     0.0
#     1e-3     0.01
#     3e-4     0.0
#     3e-4     0.01
#
#  Each task writes grid/<task>.tsv with its point and a score; `collect.sh` (run after the
#  whole array, with --dependency=afterok:<array id>) joins them into one table.
#
#  Why an array and not a loop: every point gets its own log, its own time limit, and a
#  failed point can be rerun alone with --array=<N>.
#
#  Notes for whoever edits this:
#    * keep the grid and --array in step (4 points: --array=1-4)
#    * %2 keeps us at two running tasks, the share the lab agreed on
#    * SLURM_ARRAY_TASK_ID is 1-based here because sed's line numbers are
# ===========================================================================================

set -euo pipefail

GRID=$(cat <<'TABLE'
1e-3 0.0
1e-3 0.01
3e-4 0.0
3e-4 0.01
TABLE
)

point() {
    # the task's line of the grid
    echo "${GRID}" | sed -n "${SLURM_ARRAY_TASK_ID}p"
}

read -r LR WD <<< "$(point)"
[ -n "${LR}" ] || { echo "no grid point for task ${SLURM_ARRAY_TASK_ID}" >&2; exit 2; }

OUT_DIR="${SLURM_SUBMIT_DIR}/grid"
mkdir -p "${OUT_DIR}"

echo "grid point ${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT:-4}: lr=${LR} wd=${WD} (array ${SLURM_ARRAY_JOB_ID})"

score=$(python3 - "${LR}" "${WD}" <<'PY'
import math, sys
lr, wd = float(sys.argv[1]), float(sys.argv[2])
# a stand-in for training: a smooth function of the point
print(round(1.0 / (1.0 + abs(math.log10(lr) + 3.2)) - wd, 4))
PY
)

printf '%s\t%s\t%s\t%s\n' "${SLURM_ARRAY_TASK_ID}" "${LR}" "${WD}" "${score}" > "${OUT_DIR}/${SLURM_ARRAY_TASK_ID}.tsv"
echo "score ${score}"
