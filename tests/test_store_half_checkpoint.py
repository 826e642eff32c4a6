"""A store whose writer was killed in the middle of a checkpoint opens whole (issue 29 §1).

SQLite in WAL mode copies pages from the -wal file into the database file in page order when it
checkpoints, and keeps the WAL until the copy is done: a writer killed between the two leaves a
database file that is half old, half new, and consistent only read together with its WAL. The
crash soak (seed 5, point 808) met it: the resumed coordinator refused the store as "database
disk image is malformed", because resel's first look at a file (is it a resel store?) read the
file alone (``immutable=1``). The state is built here the way SQLite's checkpoint leaves it —
frames copied from the WAL, page 1 among them — from the WAL's documented format
(https://www.sqlite.org/fileformat2.html#walformat: a 32-byte header, then frames of a 24-byte
header, whose first 4 bytes are the page number, and one page).
"""

from __future__ import annotations

import sqlite3
import struct

from resel.store import open_store


def _frames(wal: bytes) -> dict[int, bytes]:
    """The newest image of each page in a WAL file."""
    page_size = struct.unpack(">I", wal[8:12])[0]
    frames: dict[int, bytes] = {}
    off = 32
    while off + 24 + page_size <= len(wal):
        page = struct.unpack(">I", wal[off:off + 4])[0]
        frames[page] = wal[off + 24:off + 24 + page_size]
        off += 24 + page_size
    return frames


def test_a_store_left_half_checkpointed_by_a_killed_writer_opens_with_everything(tmp_path):
    path = tmp_path / "runs.db"
    db = open_store(path)
    conn = db.conn
    conn.execute("pragma wal_autocheckpoint = 0")
    conn.execute("pragma wal_checkpoint(truncate)")
    for batch in range(40):
        conn.executemany("insert into events (run_id, seq, time, kind, data) values (1, ?, ?, 'TaskFinished', ?)",
                         [(batch * 100 + i, float(i), '{"task": %d, "attempt": 1}' % i + " " * 150)
                          for i in range(100)])
        conn.commit()
    conn.execute("create table scratch_half (x)")   # page 1 (the schema) changes in the WAL too
    conn.commit()
    # the killed writer's state: its WAL, and half of its pages (page 1 with them) in the file
    wal = (tmp_path / "runs.db-wal").read_bytes()
    frames = _frames(wal)
    page_size = struct.unpack(">I", wal[8:12])[0]
    pages = sorted(frames)
    main = path.read_bytes()
    conn.close()   # (the last connection checkpoints and removes its WAL: both are put back)
    path.write_bytes(main)
    (tmp_path / "runs.db-wal").write_bytes(wal)
    (tmp_path / "runs.db-shm").unlink(missing_ok=True)
    with open(path, "r+b") as f:
        for page in pages[: len(pages) // 2] + [1]:
            f.seek((page - 1) * page_size)
            f.write(frames[page])
    # the file alone no longer reads (what resel's first look met), the two together do
    alone = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        alone.execute("select count(*) from events").fetchone()
        damaged = alone.execute("pragma integrity_check").fetchone()[0] != "ok"
    except sqlite3.DatabaseError:
        damaged = True
    finally:
        alone.close()
    assert damaged, "the test did not build a half-checkpointed file"
    again = open_store(path)
    assert again.conn.execute("select count(*) from events where run_id = 1").fetchone()[0] == 4000
    assert again.conn.execute("pragma integrity_check").fetchone()[0] == "ok"
