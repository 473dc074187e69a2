"""The reaper: deletes every kubetrain job whose KFP step has ended without deleting it.

A terminated KFP run kills its step's container within a second of the signal (Argo's emissary,
PID 1 of the container, exits as soon as KFP's launcher, its child, dies, and takes every other
process of the container with it), so the launcher's own delete on SIGTERM may never be sent. The
reaper runs outside the step (`python -m kubetrain.reaper`, deploy/reaper.yaml) and is what
guarantees the delete: `sweep` the mechanics, `__main__` the process.
"""

from kubetrain.reaper.sweep import Reaped, Reaper

__all__ = ["Reaped", "Reaper"]
