"""The topology file of `commdsl predict` (N136): a TOML file, so its mistakes point into that file."""

from __future__ import annotations

from commdsl.rules import Rule


class InvalidTopology(Rule):
    """a topology file that is not TOML or not a topology

    ## What it does

    Reports a `--topology` file (of `commdsl predict`) that does not parse as TOML, lacks a required
    key (`ranks_per_node`, `[intra]`'s `alpha_us` and `bandwidth_gbps`), has a key commdsl does not know,
    or gives a value of the wrong type or range (a bandwidth of 0, a negative latency), at the key in the
    file (docs/predict.md, Topology files).

    ## Why is this bad?

    Every predicted time is computed from these numbers: a misspelt key silently left at a default would
    give a confident wrong answer. So an unknown key is an error, as a missing one is.

    ## Example

    ```console
    $ printf 'ranks_per_node = 8\\n[intra]\\nalpha_us = 1\\nbandwith_gbps = 100\\n' > topo.toml
    $ commdsl predict programs/ring_allreduce.comm --world 4 --topology topo.toml
    ```

    ## Use instead

    ```comm
    # topo.toml:
    #   ranks_per_node = 8
    #   [intra]
    #   alpha_us = 1
    #   bandwidth_gbps = 100
    program ring
    world 4
    tensor x: float32[4] = 1
    all_reduce x
    expect x == 4
    ```
    """

    code = "N136"
    name = "invalid-topology"
    example_too_large = True
