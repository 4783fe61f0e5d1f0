#!/bin/bash
#SBATCH -J ckpt
#SBATCH -t 1
#SBATCH --signal=B:USR1@55
# SLURM sends USR1 to the batch shell 55 s before the limit: checkpoint and leave in time.
# expect: CD
# expect-out: checkpointing at USR1
checkpoint() {
    echo "checkpointing at USR1"
    exit 0
}
trap checkpoint USR1
echo "training"
sleep 120 &
wait
echo "never here"
exit 1
