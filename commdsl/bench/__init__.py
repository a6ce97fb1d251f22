"""`commdsl bench`: nccl-tests-style size sweeps of programs and built-in collectives on real process groups.

`plan.py` turns a program (or a generated one, `builtin.py`) into one checked Schedule per size;
`identify.py` says which collective a program stands for (its bus-bandwidth factor, `busbw.py`);
`worker.py` times every size in one launch of the runtime; `results.py` turns the timings into rows
and `output.py` writes them as a table, JSON, CSV or a plot.
"""
