#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-5%2
#SBATCH --time=0-00:10:00
#SBATCH --mem=256M
#SBATCH --output=sweep_%A_%a.out
# expect: CD
# expect-tasks: 6
# expect-out: seed=
# expect-log: sweep_%A_%a.out
SEEDS=(11 22 33 44 55 66)
SEED=${SEEDS[$SLURM_ARRAY_TASK_ID]}
echo "task $SLURM_ARRAY_TASK_ID of array $SLURM_ARRAY_JOB_ID: seed=$SEED"
