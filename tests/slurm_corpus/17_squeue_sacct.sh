#!/bin/bash
#SBATCH -J introspect
#SBATCH -t 5
# expect: CD
# expect-out: JOBID PARTITION
# expect-out: RUNNING
squeue -u "$USER"
squeue --me -h -o "%i %T" | grep "^${SLURM_JOB_ID} "
squeue -j "$SLURM_JOB_ID" --format="%.10i %.20j %.8T"
sacct -j "$SLURM_JOB_ID" --format=JobID,JobName%20,State -X
