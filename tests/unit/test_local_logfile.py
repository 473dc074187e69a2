"""A container's log file: capped by rotation like the kubelet's, and followable across rotations."""

from __future__ import annotations

import threading
from pathlib import Path

from kubetrain.backends.local.logfile import LogStream, read_log


def test_a_chatty_container_keeps_at_most_two_capped_files_and_says_what_was_dropped(tmp_path: Path) -> None:
    stream = LogStream(tmp_path / "pod.0.log", max_bytes=1000)
    line = b"x" * 99 + b"\n"
    for _ in range(35):  # 3500 bytes through a 1000-byte cap
        stream.write(line)
    stream.close()
    assert stream.path.stat().st_size <= 1000 + 200  # the cap, plus the note at the head of the file
    assert stream.rotated_path.stat().st_size <= 1000 + 200
    assert stream.dropped_bytes > 0
    first = stream.path.read_text().splitlines()[0]
    assert f"the previous part is in pod.0.log.1, {stream.dropped_bytes} earlier bytes were dropped" in first
    # Nothing else ever lands on disk: a chatty pod keeps two files, not everything it printed.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pod.0.log", "pod.0.log.1"]


def test_a_follower_reads_on_across_a_rotation(tmp_path: Path) -> None:
    stream = LogStream(tmp_path / "pod.0.log", max_bytes=400)
    read: list[str] = []
    started = threading.Event()

    def follow() -> None:
        started.set()
        read.extend(read_log(stream.path, stream=stream, follow=True))

    stream.write(b"line 0\n")
    follower = threading.Thread(target=follow)
    follower.start()
    started.wait(5)
    for i in range(1, 60):  # a few rotations of a 400-byte file; the follower keeps up with each
        stream.write(f"line {i}\n".encode())
    stream.close()
    follower.join(10)
    assert not follower.is_alive()
    lines = [x for x in read if x.startswith("line ")]
    numbers = [int(x.split()[1]) for x in lines]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # in order, none twice
    assert numbers[-1] == 59  # it reached the end in the newest file
    assert any(x.startswith("[kubetrain: the log passed 400 bytes") for x in read)


class _RotatingWhenAsked(LogStream):
    """A stream that rotates right after its generation is first read (once, while still open): the
    moment a follower that reads the generation and opens the file apart would pair the new file
    with the old generation, and read the new file again at its next look."""

    asked = False

    @property
    def generation(self) -> int:
        seen = super().generation
        if not self.asked and not self.closed:
            self.asked = True
            self.write(b"x" * 400 + b"\n")
        return seen


def test_a_rotation_between_a_followers_look_and_its_open_reads_no_line_twice(tmp_path: Path) -> None:
    stream = _RotatingWhenAsked(tmp_path / "pod.0.log", max_bytes=400)
    stream.write(b"line 0\n")
    follower = read_log(stream.path, stream=stream, follow=True)
    read = [next(follower)]
    stream.write(b"line 1\n")
    stream.close()
    read += list(follower)
    assert len(read) == len(set(read)), read  # no line twice (the note, the long line, line 1)
    assert read[0] == "line 0" and read[-1] == "line 1", read
