#!/bin/bash
#$ -N gpu -cwd -j y
#$ -l gpu=1,h_rt=1:00:00,h_vmem=2G
# expect: CD
# expect-log: %x.o%j
# expect-out: 1 GPU
n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
echo "$n GPU"
