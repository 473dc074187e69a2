"""What the KFP component bodies call: one function per step, the step's artifacts and reports.

A component body imports one function from here and calls it: all logic lives in this package,
where it is typed and unit-tested, and the component modules stay thin declarations. This package
sits below the components; the CLI's tooling above the pipelines is in :mod:`kubetrain.tooling`.
"""
