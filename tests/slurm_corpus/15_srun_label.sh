#!/bin/bash
#SBATCH --job-name=srun-flags
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --time=5
# expect: CD
# expect-out: 0: step one
# expect-out: unbuffered 1
srun -l echo "step one"
srun -u --ntasks=1 --cpus-per-task=1 python3 -c 'import os; print("unbuffered", os.environ.get("PYTHONUNBUFFERED"))'
srun --export=ALL,STAGE=two bash -c 'echo "stage $STAGE, procid $SLURM_PROCID"'
srun --mpi=pmix --cpu-bind=cores -n1 true
