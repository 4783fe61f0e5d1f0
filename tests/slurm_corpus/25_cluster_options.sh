#!/bin/bash
#SBATCH --job-name=from-cluster
#SBATCH --partition=gpu-long
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.org
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --constraint=a100
#SBATCH --exclusive
#SBATCH --time=1-00:00:00
# Options only a SLURM cluster has: named in one warning at submit, the job runs.
# expect: CD
# expect-out: ran anyway
echo "ran anyway"
