"""The records journal: every record a run keeps, on disk the moment it arrives, its generated text only there.

A run keeps every record until its metrics are computed. The generated text is the largest part of a kept
record (~1.3 KB of a 200-token answer's ~2.9 KB) and nothing reads it during the run, so the process that keeps
the records (a single process or the master) appends each one to the journal as a JSON line and drops the text
from memory; the record holds a :class:`~llmload.client.records.record.HeldText` (where the text's bytes are)
and :meth:`RequestRecord.text` / :meth:`RequestRecord.to_dict` read it back. The records file is then written
from the records as before, byte for byte, and the journal removed.

The journal is also the run's records if the process dies before it writes them (SIGKILL, out of memory, the
machine): each line is a whole record (a line is one ``write`` of whole bytes; a failed write is cut back), in
the order the records arrived, readable by ``llmload report`` and ``read_records``. A record a frozen worker
sent twice is in it twice; the records file keeps one. docs/reliability.md, "Records journal".

A write that fails (disk full, quota) stops the journal with one warning line: the run goes on with its texts
in memory, and loses nothing.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

import orjson

from llmload.client.records.record import HeldText, RequestRecord

#: the key the journal writes last on each line, so that its value's bytes are known without parsing the line
_TEXT_KEY = b',"generated_text":'


class RecordJournal:
    """Appends records to ``path`` (an unnamed temporary file when None) and holds their texts there.

    ``warn`` gets the one line said when a write fails."""

    def __init__(self, path: Path | None, warn: Callable[[str], None]) -> None:
        self.path = path
        self._warn = warn
        if path is None:
            with tempfile.TemporaryFile() as unnamed:
                self._fd = os.dup(unnamed.fileno())
        else:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._closer = weakref.finalize(self, os.close, self._fd)
        #: bytes written: every one of them belongs to a whole line
        self.size = 0
        #: records written
        self.records = 0
        #: why writing stopped ("" while it works)
        self.failed = ""

    @property
    def complete(self) -> bool:
        """Every record added is in the journal."""
        return not self.failed

    def add(self, record: RequestRecord) -> tuple[int, int] | None:
        """Write ``record`` as one line and, when it has a text, drop the text from memory. Returns where the line
        is (offset, length), or None when the journal could not take it."""
        if self.failed:
            return None
        data = record.to_dict(compact=True)
        text = data.pop("generated_text")
        head = orjson.dumps(data)[:-1] + _TEXT_KEY
        value = orjson.dumps(text)
        line = head + value + b"}\n"
        try:
            self._write(line)
        except OSError as exc:
            self.failed = exc.strerror or str(exc)
            where = f" {self.path}" if self.path is not None else ""
            self._warn(f"warning: cannot write the records journal{where}: {self.failed}; the run goes on with "
                       "its records in memory")
            return None
        offset = self.size
        if text:
            record.held_text = HeldText(self, offset + len(head), len(value))
            record.generated_text = ""
        self.size += len(line)
        self.records += 1
        return offset, len(line)

    def _write(self, line: bytes) -> None:
        done = 0
        try:
            while done < len(line):
                done += os.pwrite(self._fd, line[done:], self.size + done)
        except OSError:
            if done:
                try:
                    os.ftruncate(self._fd, self.size)  # the file ends after a whole line
                except OSError:
                    pass
            raise

    def read_line(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (whole lines, as :meth:`add` said where they are)."""
        data = os.pread(self._fd, length, offset)
        while len(data) < length:  # a short read (a signal): read the rest
            more = os.pread(self._fd, length - len(data), offset + len(data))
            if not more:
                raise OSError(f"the records journal ends before byte {offset + length}")
            data += more
        return data

    def read_text(self, offset: int, length: int) -> str:
        """The text whose JSON string is ``length`` bytes at ``offset``."""
        text = orjson.loads(os.pread(self._fd, length, offset))
        assert isinstance(text, str)
        return text

    def remove(self) -> None:
        """Delete the journal's file (the records file now holds every record); the texts stay readable until
        the journal is gone."""
        if self.path is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            self.path = None
