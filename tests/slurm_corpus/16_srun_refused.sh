#!/bin/bash
#SBATCH -J many-tasks
#SBATCH -t 5
#SBATCH --ntasks-per-node=1
# Four tasks per node is MPI-style; labq's srun refuses it in one line (the script stops: set -e).
# expect: F
# expect-out: srun: --ntasks-per-node=4: labq runs one task per node
set -e
srun --ntasks-per-node=4 python3 -c 'print("rank")'
echo "not reached"
