#!/bin/bash
#SBATCH --job-name=gpu-check
#SBATCH --partition=gpu
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=4
#SBATCH --mem=4G
#SBATCH --time=00:05:00
# expect: CD
# expect-out: 2 GPUs
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
echo "$n GPUs (SLURM_GPUS_ON_NODE=$SLURM_GPUS_ON_NODE)"
[ "$n" -eq 2 ]
