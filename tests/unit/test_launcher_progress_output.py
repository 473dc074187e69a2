"""The launcher's lines never fail it: a reader that is gone must not stop a SIGTERM from deleting the job."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_a_launcher_line_to_a_closed_pipe_neither_raises_nor_is_retried() -> None:
    # On the KFP backend a terminated run's SIGTERM kills KFP's launcher, the reader of the step's
    # output, together with the step; the step's next line then met a broken pipe and raised
    # before the job was deleted (found on the real backend: the job trained on).
    read, write = os.pipe()
    os.close(read)
    code = textwrap.dedent("""
        import sys
        from kubetrain.launcher import progress, stderr_sink, timestamped_stderr_sink
        for _ in range(3):
            stderr_sink("a status line")
            timestamped_stderr_sink("a pod log line")
        assert progress._output_lost.is_set()
        print("survived", file=sys.__stdout__, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], stderr=write, stdout=subprocess.PIPE, text=True,
                          check=False, timeout=60)  # fmt: skip
    os.close(write)
    assert done.returncode == 0 and done.stdout.strip() == "survived"
