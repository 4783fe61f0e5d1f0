#!/bin/bash
#$ -N hello -cwd -j y
#$ -S /bin/bash
#$ -l h_rt=0:05:00
# expect: CD
# expect-log: %x.o%j
# expect-out: hello from job
echo "hello from job $JOB_ID ($JOB_NAME) in $SGE_O_WORKDIR"
