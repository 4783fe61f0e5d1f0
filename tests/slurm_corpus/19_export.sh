#!/bin/bash
#SBATCH --job-name=exported
#SBATCH --export=ALL
#SBATCH --time=5
# The submitter's shell had LAB_DATA set (sbatch's default: the job gets the submit environment).
# expect: CD
# expect-out: data at /
echo "data at ${LAB_DATA:?LAB_DATA not exported}"
