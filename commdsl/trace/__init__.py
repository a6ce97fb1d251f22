"""`commdsl trace`: check a real PyTorch script by recording what every rank calls.

`record.py` (imports torch) runs the script once per rank under torch's `fake` process group and
returns each rank's calls (`events.py`); `to_comm.py` (no torch) writes them as a `.comm` program and
remembers, for every statement it writes, the script line it came from; `check.py` runs the ordinary
checker on that program and points each diagnostic back at the script; `flight.py` reads torch
flight-recorder dumps into the same events. docs/trace.md says what is supported and why.
"""
