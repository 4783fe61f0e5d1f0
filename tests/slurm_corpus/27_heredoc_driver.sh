#!/bin/bash
#SBATCH -J heredoc-driver
#SBATCH -t 5
# A driver that writes the next job inline: sbatch reads the script from stdin, #SBATCH lines included.
# expect: CD
# expect-out: from heredoc
# expect-children: CD
cd "$SLURM_SUBMIT_DIR"
sbatch -W <<'EOT'
#!/bin/bash
#SBATCH -J inner
#SBATCH -o inner-%j.txt
echo "from heredoc"
EOT
cat inner-*.txt
