#!/bin/bash
#$ -N driver -cwd -j y
#$ -l h_rt=0:05:00
# expect: CD
# expect-log: %x.o%j
# expect-out: submitted
# expect-children: CD CD
FIRST=$(qsub -terse -cwd -j y -N first -b y /bin/echo one)
qsub -cwd -j y -N second -hold_jid $FIRST -b y /bin/echo two
echo "submitted after $FIRST"
