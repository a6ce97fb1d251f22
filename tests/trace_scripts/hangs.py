"""Rank 1 waits for input that never comes (stdin is /dev/null... so it sleeps instead): the trace's
per-rank time limit stops it, with everything it started."""

import subprocess
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)
