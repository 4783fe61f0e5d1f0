#!/bin/bash
#SBATCH -J canceller
#SBATCH -t 5
# expect: CD
# expect-out: CANCELLED
# expect-children: CA
set -e
victim=$(sbatch --parsable -H -J victim --wrap 'sleep 600')
scancel "$victim"
sleep 1
sacct -j "$victim" -X -n -o State
