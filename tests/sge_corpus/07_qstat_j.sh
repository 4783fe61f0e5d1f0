#!/bin/bash
#$ -N introspect -cwd -j y
# expect: CD
# expect-log: %x.o%j
# expect-out: job_number:
# expect-out: job_name:                   introspect
qstat -j $JOB_ID
