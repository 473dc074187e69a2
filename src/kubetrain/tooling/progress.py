"""What a local run prints: progress on the console, everything in the run's log file.

`kfp.local` prints, for every step, its executor input as pretty JSON (dozens of lines), kfp's
executor chatter, each output artifact's repr, separators and ANSI colours, and it warns about
settings that only matter on a cluster. None of it is the user's concern on this machine; all of
it is kept, verbatim, in `<run dir>/run.log`. The console gets the progress a user follows:

- `step NAME: running` when kfp.local starts a step, `step NAME: done` / `step NAME: failed` when
  it ends;
- what the step itself prints (job and pod transitions, training progress, errors, tracebacks),
  indented under it;
- anything else this process prints (the cancellation notice), and warnings and errors logged
  here.

With `verbose` the console gets every line, as kfp.local printed it.
"""

from __future__ import annotations

import io
import logging
import re
from collections import deque
from typing import TextIO

from kubetrain.urls import redact_text

RUN_LOG = "run.log"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# kfp.local's own log lines: "13:22:02.306 - INFO - message".
_KFP_LOG = re.compile(r"^\d\d:\d\d:\d\d\.\d+ - [A-Z]+ - (?P<message>.*)$")
_EXECUTING = re.compile(r"^Executing task '(?P<task>[^']+)'")
_FINISHED = re.compile(r"^Task '(?P<task>[^']+)' finished with status (?P<status>\w+)")
_OUTPUTS = re.compile(r"^Task '(?P<task>[^']+)' outputs:")
_PIPELINE_DONE = re.compile(r"^Pipeline '[^']+' finished with status (?P<status>[A-Z]+)")
# Logged through this process's logging (not kfp.local's own logger) when a dsl.If group's condition is false.
_SKIPPED_GROUP = re.compile(r"^Skipping conditional task (?P<task>\S+) \(condition evaluated to False\)")
_STEP_INDENT = "    "  # kfp.local indents a step's own output by four spaces
_TAIL_LINES = 20


class ProgressFilter:
    """Decides, line by line, what of kfp.local's output the console shows; remembers each step's tail."""

    def __init__(self) -> None:
        self.task: str | None = None
        self._in_executor_input = False
        self._input_indent = 0
        self._in_outputs = False
        self.tails: dict[str, deque[str]] = {}
        self.started: set[str] = set()  # steps kfp.local started (a step may fail before making its directory)
        # kfp.local's verdict per step (SUCCESS, FAILURE): an importer, run in this process, makes no directory.
        self.finished: dict[str, str] = {}
        self.skipped_groups: set[str] = set()  # dsl.If groups (their DAG tasks) kfp.local skipped
        self.pipeline_status: str | None = None  # kfp.local's verdict on the whole pipeline: SUCCESS, FAILURE

    def note_log(self, message: str) -> None:
        """A message kfp.local logged through this process's logging: remembers the groups it skipped."""
        if m := _SKIPPED_GROUP.match(message):
            self.skipped_groups.add(m.group("task"))

    def feed(self, raw: str) -> str | None:
        """The line to show for `raw` (one line, no newline), or None to show nothing."""
        line = _ANSI.sub("", raw)
        kfp = _KFP_LOG.match(line)
        if kfp:
            return self._kfp_message(kfp.group("message"))
        if line.strip() == "-" * 80:  # kfp.local's separator, indented too inside a ParallelFor
            self._in_outputs = False
            return None
        if line.startswith(_STEP_INDENT) and self.task is not None:
            return self._step_line(self.task, line)
        if not line.strip():
            return None
        self._in_outputs = False
        return line

    def _kfp_message(self, message: str) -> str | None:
        self._in_outputs = False
        if m := _EXECUTING.match(message):
            self.task = m.group("task")
            self._in_executor_input = False
            self.tails[self.task] = deque(maxlen=_TAIL_LINES)
            self.started.add(self.task)
            return f"step {self.task}: running"
        if m := _FINISHED.match(message):
            self.finished[m.group("task")] = m.group("status")
            return f"step {m.group('task')}: {'done' if m.group('status') == 'SUCCESS' else 'failed'}"
        if _OUTPUTS.match(message):
            self._in_outputs = True
        if m := _PIPELINE_DONE.match(message):
            self.pipeline_status = m.group("status")
        # The pipeline's start and end, "Streamed logs:": the summary says all of that.
        return None

    def _step_line(self, task: str, line: str) -> str | None:
        if self._in_outputs:
            return None  # the outputs' reprs; the summary lists where each output is
        body = line[len(_STEP_INDENT) :]
        indent = len(body) - len(body.lstrip())
        if self._in_executor_input:
            # The JSON dump ends with a closing brace at its header's indentation (deeper than the
            # step's own for a step inside a ParallelFor, whose iterations kfp.local runs in threads).
            self._in_executor_input = not (body.strip() == "}" and indent == self._input_indent)
            return None
        if body.lstrip().startswith("[KFP Executor"):
            self._in_executor_input = body.rstrip().endswith("Got executor_input:")
            self._input_indent = indent
            return None
        if not body.strip():
            return None
        self.tails[task].append(body)
        return line

    def last_line(self, task: str) -> str:
        """The last line a step printed itself (its error, when it failed without saying more), or ''."""
        tail = self.tails.get(task)
        return tail[-1].strip() if tail else ""


class RunLog(io.TextIOBase):
    """A text stream: every line to the log file; to the console what :class:`ProgressFilter` keeps."""

    def __init__(self, log: TextIO, console: TextIO, *, verbose: bool = False) -> None:
        self.log = log
        self.console = console
        self.verbose = verbose
        self.progress = ProgressFilter()
        self._partial = ""
        self._console_gone = False

    def writable(self) -> bool:
        """It is written to."""
        return True

    def write(self, text: str) -> int:
        """Split into lines; each, its URLs' secrets redacted, goes to the log and, filtered, to the console.

        A line is written once it is complete (:meth:`finish` writes a last one without a newline):
        a URL split between two writes is redacted whole. kfp's executor prints every parameter
        (a presigned `source` among them), and a step may print what it was given.
        """
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for raw in lines:
            line = redact_text(raw)
            self.log.write(line + "\n")
            shown = self.progress.feed(line)
            if self.verbose:
                self._to_console(line + "\n")
            elif shown is not None:
                self._to_console(shown + "\n")
        return len(text)

    def finish(self) -> None:
        """Write out a last line that has no newline, then flush."""
        if self._partial:
            self.write("\n")
        self.flush()

    def write_log_only(self, text: str) -> None:
        """To the log file only (to the console too when verbose): warnings and chatter of no use here."""
        text = redact_text(text)
        self.log.write(text)
        if self.verbose:
            self._to_console(text)

    def _to_console(self, text: str) -> None:
        if self._console_gone:
            return
        try:
            self.console.write(text)
        except OSError:
            # The terminal hung up (EIO) or its reader went away: the run goes on, and its log keeps
            # every line; a console write failing must not fail the step that printed it.
            self._console_gone = True

    def flush(self) -> None:
        """Flush both ends (a partial line stays buffered until its newline)."""
        self.log.flush()
        if not self._console_gone:
            try:
                self.console.flush()
            except OSError:
                self._console_gone = True


class RunLogHandler(logging.Handler):
    """This process's logging during a run: warnings and errors shown, the rest in the log only."""

    def __init__(self, stream: RunLog) -> None:
        super().__init__(logging.DEBUG)
        self.stream = stream
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))

    def emit(self, record: logging.LogRecord) -> None:
        """Route one record."""
        self.stream.progress.note_log(record.getMessage())
        text = self.format(record) + "\n"
        if record.levelno >= logging.WARNING:
            self.stream.write(text)
        else:
            self.stream.write_log_only(text)
