#!/bin/bash
# One-way streams against ping-pongs through `commdsl bench`, four ranks on the host, launches alternated:
# k=2 is one pair (ranks 2-3 idle), k=4 two pairs at once (docs/predict-accuracy.md, "One-way streams on a
# crowded host"). Run from the repository root; writes the JSONs beside this script.
here=$(dirname "$0")
for rep in 1 2 3; do
  for k in 2 4; do
    for p in pp stream; do
      commdsl bench "$here/pairs_$p.comm" --nproc 4 --set k=$k --sizes 1M:16M --iters 10 --warmup 3 \
        --json "$here/$p-k$k-r$rep.json"
    done
  done
done
