"""The `labq` command's launcher, written over the one pip makes (`make install`, `make install-system`).

pip's launcher imports `re` to strip a Windows suffix from argv[0], and `re` imports `enum`: 12 M of
the 62 M instructions of a `labq sub`, 22 M of the 39 M of a `labq sub --help` (callgrind, issue 39
item 4), which otherwise imports neither. This one is pip's less that line, with pip's interpreter.

    python -m labq.launcher PATH      # PATH: the script pip wrote (its first line names the interpreter)
"""
import os
import sys


def text(interpreter: str) -> str:
    return (f"#!{interpreter}\n# labq's launcher (labq/launcher.py): pip's, without its `import re`\n"
            "import sys\nfrom labq.cli.main import main\nif __name__ == '__main__':\n    sys.exit(main())\n")


def write(path: str) -> None:
    with open(path) as f:
        first = f.readline()
    interpreter = first[2:].strip() if first.startswith("#!") else sys.executable
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text(interpreter))
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


if __name__ == "__main__":
    write(sys.argv[1])
