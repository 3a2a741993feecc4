"""Which cluster to rent, and how big each step should ask to be.  ``cluster`` reads cluster
and catalog files into machine classes; ``virtual`` searches how many nodes of each catalog
type meet a deadline at the least cost (a Pareto search over ``clusterpoint.ClusterPoint``
values, each a planned candidate cluster; ``pareto`` chooses on the frontier, ``results``
holds the answers as frozen values); ``anchors`` finds the cheapest single-type and
two-type clusters its saving is quoted against; ``rightsize`` suggests smaller requests for
steps that asked far more memory or CPUs than they used.
"""
