"""The CLI's tooling over the shipped pipelines: the catalog, compiling, local runs and submission.

This package sits on top of the KFP layer (it imports the components and pipelines directly);
nothing below it imports it. The code the component bodies run is in :mod:`kubetrain.kfp_runtime`.
"""
