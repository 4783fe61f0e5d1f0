#!/bin/bash
#SBATCH -J srun-python
#SBATCH -t 10
#SBATCH -c 2
#SBATCH --mem=1G
#SBATCH -o %x-%j.log
# expect: CD
# expect-log: %x-%j.log
# expect-out: cpus 2 job
date
srun python3 -c 'import os; print("cpus", os.environ["SLURM_CPUS_PER_TASK"], "job", os.environ["SLURM_JOB_ID"])'
