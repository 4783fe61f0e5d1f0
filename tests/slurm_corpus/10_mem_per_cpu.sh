#!/bin/bash
#SBATCH --job-name=mem-per-cpu
#SBATCH --cpus-per-task=2
#SBATCH --mem-per-cpu=64M
#SBATCH --time=5
# 128M in all: holding 1 GiB (as a training step holds its batch) must end the job out of memory,
# never run unlimited.
# expect: OOM
python3 -c 'import time; x = bytearray(1 << 30); print("allocated", len(x), flush=True); time.sleep(20)'
