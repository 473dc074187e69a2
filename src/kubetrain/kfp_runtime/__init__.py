"""What the KFP component bodies call, and the CLI's local run, compile and submit.

A component body imports one function from here and calls it: all logic lives in this package,
where it is typed and unit-tested, and the component modules stay thin declarations. The
component and pipeline modules are loaded only by name at call time (:mod:`.catalog`), so this
package never imports the KFP layer above it.
"""
