#!/bin/bash
#SBATCH -J pipeline
#SBATCH -t 00:10:00
# A driver: preprocess -> train -> evaluate, each step after the one before succeeded.
# expect: CD
# expect-out: submitted pipeline
# expect-children: CD CD CD
set -e
cd "$SLURM_SUBMIT_DIR"
pre=$(sbatch --parsable -J prep --wrap 'echo preprocessing > prep.done')
train=$(sbatch --parsable -J train --dependency=afterok:$pre --wrap 'test -f prep.done && echo trained > train.done')
sbatch --dependency=afterok:${train} -J eval --kill-on-invalid-dep=yes --wrap 'cat prep.done train.done'
echo "submitted pipeline $pre -> $train"
