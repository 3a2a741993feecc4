"""hetflow against its peers on the same workloads: Snakemake (snakepeer)."""
