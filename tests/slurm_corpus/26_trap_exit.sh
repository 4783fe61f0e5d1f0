#!/bin/bash
#SBATCH -J scratch
#SBATCH -t 5
# expect: CD
# expect-out: removed scratch
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/job-${SLURM_JOB_ID}-XXXX")
cleanup() { rm -rf "$SCRATCH"; echo "removed scratch"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
echo "data" > "$SCRATCH/part"
srun cat "$SCRATCH/part"
