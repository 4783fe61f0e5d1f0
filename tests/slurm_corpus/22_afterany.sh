#!/bin/bash
#SBATCH -J cleanup-chain
#SBATCH -t 5
# The cleanup runs whatever happened to the step before (afterany).
# expect: CD
# expect-children: F CD
set -e
cd "$SLURM_SUBMIT_DIR"
step=$(sbatch --parsable -J flaky --wrap 'exit 1')
sbatch --parsable -J cleanup -d afterany:$step --wrap 'echo cleaned > cleanup.done'
