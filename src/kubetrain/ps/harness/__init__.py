"""Not part of a job: running a whole PS job locally (localrun), the single-process baseline, the
synthetic click data and the record accounting the tests and benchmarks use."""
