"""Design-space exploration beyond the paper (``snakemake dse``): configurations sampled over hardware,
serving and workload axes (``design``), each simulated on every system with its configuration chosen by
the fair-referee search (``sweep``), each system's capacity under a latency SLO (``capacity``), the Sobol
indices of a gain (``sensitivity``) and a deployable draft-length table (``schedule``)."""
