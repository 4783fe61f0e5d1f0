#!/bin/bash
#SBATCH --job-name=modules
#SBATCH --time=5
#SBATCH --mem=256M
# Lab scripts load modules unconditionally, often under set -e.
# expect: CD
# expect-out: after modules
set -e
module purge
module load gcc/11.2.0 cuda/11.8 cudnn/8.6
module list
echo "after modules"
