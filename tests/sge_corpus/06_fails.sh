#!/bin/bash
#$ -N broken -cwd -j y
# expect: F
# expect-log: %x.o%j
# expect-out: no such model
python3 -c 'import sys; print("no such model"); sys.exit(1)'
