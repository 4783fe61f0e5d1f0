#!/bin/bash
#SBATCH --job-name=omp
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=1G
#SBATCH --time=00:05:00
# expect: CD
# expect-out: threads 4
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export OMP_PROC_BIND=close
srun --cpus-per-task=$SLURM_CPUS_PER_TASK python3 -c 'import os; print("threads", os.environ["OMP_NUM_THREADS"])'
