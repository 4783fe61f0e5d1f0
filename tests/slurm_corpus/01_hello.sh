#!/bin/bash
#SBATCH --job-name=hello
#SBATCH --time=00:05:00
#SBATCH --cpus-per-task=1
#SBATCH --mem=512M
# expect: CD
# expect-out: hello from
echo "hello from $(hostname) as $USER, job $SLURM_JOB_ID ($SLURM_JOB_NAME)"
echo "submitted from $SLURM_SUBMIT_DIR"
