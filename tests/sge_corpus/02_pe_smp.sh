#!/bin/bash
#$ -N threads
#$ -cwd
#$ -j y
#$ -pe smp 4
#$ -l h_rt=00:10:00,h_vmem=256M
# h_vmem is per slot: 4 x 256M.
# expect: CD
# expect-log: %x.o%j
# expect-out: slots 4 threads 4
export OMP_NUM_THREADS=$NSLOTS
echo "slots $NSLOTS threads $OMP_NUM_THREADS"
