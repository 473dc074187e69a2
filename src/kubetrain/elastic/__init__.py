"""Elastic parameter-server jobs on a cluster: the master's watch on its job's worker pods.

The PS runtime (`kubetrain.ps`) knows nothing of Kubernetes; the Kubernetes backend knows nothing
of the PS runtime. This package joins them where the master runs in its pod: it reads the job's
worker pods through the backend's pod watch and tells the master which worker was preempted,
evicted or deleted (so its leased tasks go back on the queue at once, not when the lease runs out)
and which new worker pod was placed.
"""
