#!/bin/bash
#$ -N vars -cwd -j y
#$ -V
#$ -v MODEL=big
# expect: CD
# expect-log: %x.o%j
# expect-out: model big, data /srv/lab/data, tmp ok
[ -d "$TMPDIR" ] && tmp=ok
echo "model $MODEL, data $LAB_DATA, tmp $tmp"
