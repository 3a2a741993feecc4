"""The local runner's costs: launch overhead (overhead, launch), issue 26's throughput
(throughput, cachedrerun, scale, batchitem), loading (loader), and checkpoints
(checkpoint, checkpoint_report).
"""
