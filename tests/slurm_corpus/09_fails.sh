#!/bin/bash
#SBATCH -J failing
#SBATCH -t 5
# expect: F
# expect-out: missing input
if [ ! -f "$SLURM_SUBMIT_DIR/does-not-exist.csv" ]; then
    echo "missing input" >&2
    exit 3
fi
