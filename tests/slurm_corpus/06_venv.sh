#!/bin/bash
#SBATCH -J venv
#SBATCH -t 5
#SBATCH --mem=512M
# expect: CD
# expect-out: envs/lab
source "$HOME/envs/lab/bin/activate"
which python
python -c 'import sys; print("prefix", sys.prefix)'
deactivate
