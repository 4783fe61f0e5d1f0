#!/bin/bash
#SBATCH -J waiter
#SBATCH -t 5
# sbatch -W: wait for the child and take its exit code.
# expect: CD
# expect-out: child said 0
# expect-children: CD
sbatch -W -J child --wrap 'echo from child'
echo "child said $?"
