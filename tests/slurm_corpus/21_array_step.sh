#!/bin/bash
#SBATCH -J stepped
#SBATCH -a 1-7:3
#SBATCH -t 5
# expect: CD
# expect-tasks: 3
# expect-out: index
echo "index $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"
case $SLURM_ARRAY_TASK_ID in 1|4|7) ;; *) exit 1 ;; esac
