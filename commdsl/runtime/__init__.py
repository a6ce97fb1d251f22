"""Executes a Schedule for real on torch.distributed (`commdsl run`); only this package imports torch.

prepare.py   expand at the run's world size, check and simulate (no torch)
launch.py    start local workers with torch's elastic launcher, collect what they report
guard.py     the launcher's hang guard, reading every rank's progress slot
progress.py  the shared per-rank progress slots (op index, start time, state)
worker.py    one rank: set-up, the timed loop over its ops, its records
ops.py       one small function per op kind, turning an op into a torch.distributed call
records.py   the JSON records a rank sends, and the result assembled from them
external.py  one rank under torchrun, mpirun or srun (rank 0 collects through the c10d store)
envinfo.py   rank and world from the launchers' environment variables; backend choice
outcome.py   expects, comparison with the simulator, and who is to blame for a failure
report.py    --report and --trace files
config.py    RunConfig, the one description of a run the CLI builds
"""
