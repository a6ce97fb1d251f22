"""`commdsl bench`: nccl-tests-style size sweeps of programs and built-in collectives on real process groups.

`sizes.py` reads `--sizes`; `plan.py` turns a program (or a generated one, `builtin.py`) into one
checked Schedule per size, sized through its size param; `identify.py` says which collective a
program stands for (its size convention and bus-bandwidth factor, `busbw.py`); `launch.py` runs the
Plan with the runtime's launcher and `worker.py` times every size in that one launch; `results.py`
turns the timings into rows and `output.py` writes them as a table, JSON, CSV or a plot.
`config.py` is the frozen description of a sweep that the CLI builds.
"""
