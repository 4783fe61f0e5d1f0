#!/bin/bash
#SBATCH --job-name=conda-train
#SBATCH --time=00:05:00
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
# expect: CD
# expect-out: conda env lab
source ~/miniconda3/etc/profile.d/conda.sh
conda activate lab
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
python -c 'import os; print("conda env", os.environ["CONDA_DEFAULT_ENV"], "threads", os.environ["OMP_NUM_THREADS"])'
