"""A folder on a site that a transfer test may write in: local (under tmp_path) or on the
testbed's SSH site (under its work folder, removed afterwards). Shared by the transport tests."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Iterator

from resel.backends.transport import LocalTransport, SSHTransport, Transport


@contextmanager
def site_folder(kind: str, testbed, tmp_path, tag: str) -> Iterator[tuple[Transport, str]]:
    """(transport, folder) for ``kind`` "local" or "ssh"; ``tag`` names the remote folder."""
    if kind == "local":
        folder = tmp_path / "site"
        folder.mkdir()
        yield LocalTransport(), str(folder)
        return
    t = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    work = f"{testbed.work_b}/test-{tag}-{uuid.uuid4().hex[:8]}"
    t.makedirs(work)
    try:
        yield t, work
    finally:
        t.run(["rm", "-rf", "--", work])
        t.close()
