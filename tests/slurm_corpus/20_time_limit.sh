#!/bin/bash
#SBATCH -J too-long
#SBATCH --time=0:05
# mm:ss: five seconds, then SLURM (and labq) end it TIMEOUT.
# expect: TO
echo "start"
sleep 120
