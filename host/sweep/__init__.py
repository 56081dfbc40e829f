"""The sweep (layer L4): the target registry, the job plan, and running the rows locally or on a Dask cluster.

`registry` finds targets by name (the only module that names them), `jobs` plans and measures one row, `cli` is
`python -m host.compare`, `cluster` and `worker` are the two sides of a cluster sweep, `nodes` is
`python -m host.cluster`, `cluster_bench` measures one worker against two.
"""
