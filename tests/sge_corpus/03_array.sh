#!/bin/bash
#$ -N chunks
#$ -cwd -j y
#$ -t 1-10:3 -tc 2
#$ -l h_rt=0:05:00
# Tasks 1, 4, 7, 10: each takes a chunk of SGE_TASK_STEPSIZE items.
# expect: CD
# expect-tasks: 4
# expect-log: %x.o%A.%a
# expect-out: first 1 last 10 step 3
END=$((SGE_TASK_ID + SGE_TASK_STEPSIZE - 1))
[ $END -gt $SGE_TASK_LAST ] && END=$SGE_TASK_LAST
echo "task $SGE_TASK_ID: items $SGE_TASK_ID..$END (first $SGE_TASK_FIRST last $SGE_TASK_LAST step $SGE_TASK_STEPSIZE)"
