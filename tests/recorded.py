"""The one recorded-reply double of the tests (issue 27 item 5): a scheduler or a server that
answers from replies recorded off the real thing, and remembers what it was asked.

A test hands resel's client one of these instead of a transport (:class:`Recorded`: argv →
stdout, stderr, exit status), an HTTP session (:class:`RecordedSession`: URL → status and
body) or an HTCondor binding (:class:`RecordedSchedd`, :class:`RecordedCollector`: the recorded
ads). The replies are the real captured outputs (``../shared/data/formats``, ``tests/data``),
read by the test that uses them; where a test builds or cuts one it says CONSTRUCTED there. A
command nothing was recorded for fails the test at once, naming the command — never an
invented empty answer — unless the double wraps a real transport (``inner``): then it passes
through, and only the recorded commands are answered from the recording (faults on the live
testbed: one real reply replaced).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from resel.backends.transport import Completed


class UnexpectedCall(AssertionError):
    """The code under test asked for something no reply was recorded for."""


@dataclass(frozen=True)
class Reply:
    """What a command printed and how it exited."""

    stdout: str = ""
    stderr: str = ""
    code: int = 0


#: a recorded answer: a Reply, a bare stdout (exit 0), or a function of the argv giving either
#: (None: nothing recorded for this argv)
Answer = Union[Reply, str, Callable[[list], Union[Reply, str, None]]]


class Recorded:
    """A transport answering each command from ``replies``: keyed by the whole argv (a tuple),
    else by the tool (``argv[0]``). Every call is kept: ``calls`` (argv lists) and ``inputs``
    (what was sent on stdin), in order; files written through it land in ``files``."""

    def __init__(self, replies: Mapping[tuple | str, Answer], *, inner: Any = None):
        self.replies, self.inner = dict(replies), inner
        self.calls: list[list[str]] = []
        self.inputs: list[str | None] = []
        self.files: dict[str, bytes] = {}

    def run(self, argv, *, env=None, input=None, timeout=None, idempotent=False, **kw):
        argv = list(argv)
        self.calls.append(argv)
        self.inputs.append(input)
        reply = self._answer(argv)
        if reply is None:
            if self.inner is not None:
                return self.inner.run(argv, env=env, input=input, timeout=timeout, idempotent=idempotent, **kw)
            raise UnexpectedCall(f"no reply recorded for `{shlex.join(argv)}`; recorded: "
                                 + ", ".join(sorted(map(_shown, self.replies))))
        if isinstance(reply, str):
            reply = Reply(reply)
        return Completed(tuple(argv), reply.code, reply.stdout, reply.stderr)

    def _answer(self, argv: list[str]) -> Reply | str | None:
        answer = self.replies.get(tuple(argv), self.replies.get(argv[0]) if argv else None)
        return answer(argv) if callable(answer) else answer

    def write_file(self, path, data, *, mode=None):
        if self.inner is not None:
            return self.inner.write_file(path, data, mode=mode)
        self.files[path] = data

    def remove(self, path):
        if self.inner is not None:
            return self.inner.remove(path)
        self.files.pop(path, None)

    def __getattr__(self, name):
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(f"{name}: the recorded transport has no {name} (nothing recorded for it)")
        return getattr(inner, name)


def _shown(key) -> str:
    return shlex.join(key) if isinstance(key, tuple) else f"{key} …"


# ---------------------------------------------------------------------------- HTTP (slurmrestd)


@dataclass
class Response:
    """An HTTP reply as ``requests`` gives it (the fields resel reads)."""

    text: str
    status_code: int = 200
    headers: dict = field(default_factory=dict)

    @classmethod
    def of(cls, doc, status: int = 200) -> Response:
        return cls(json.dumps(doc), status)

    def json(self):
        return json.loads(self.text)

    def close(self):
        pass


def after_slurm(url: str) -> str:
    """slurmrestd's path below ``/slurm/`` (``v0.0.40/job/16``): how recordings are keyed."""
    return url.split("/slurm/", 1)[1]


class RecordedSession:
    """A ``requests.Session`` answering each request from ``replies`` by ``key(url)``
    (default: the path below ``/slurm/``); ``default`` answers what was not recorded (a server's
    real 404, say), else the test fails naming the URL. ``asked`` keeps each key, in order."""

    def __init__(self, replies: Mapping[str, Response | Callable[[str], Response | None]], *,
                 key: Callable[[str], str] = after_slurm, default: Response | None = None):
        self.replies, self.key, self.default = replies, key, default
        self.asked: list[str] = []
        self.headers: dict = {}

    def request(self, method, url, json=None, timeout=None, headers=None, allow_redirects=True, **kw):
        path = self.key(url)
        self.asked.append(path)
        reply = self.replies.get(path)
        reply = reply(path) if callable(reply) else reply
        if reply is None:
            reply = self.default
        if reply is None:
            raise UnexpectedCall(f"no reply recorded for {method} {url}; recorded: {', '.join(sorted(self.replies))}")
        return reply

    def get(self, url, timeout=None, **kw):
        return self.request("GET", url, timeout=timeout, **kw)


# ---------------------------------------------------------------------------- htcondor2 bindings


class RecordedSchedd:
    """htcondor2's Schedd answering query/history with recorded ads (parsed by classad2) that
    the constraint selects (evaluated by classad2): a stand-in for the daemon only. ``calls``
    keeps (method, constraint)."""

    def __init__(self, queue: list[dict], history: list[dict]):
        import classad2
        self.queue = [classad2.ClassAd(ad) for ad in queue]
        self.history_ads = [classad2.ClassAd(ad) for ad in history]
        self.calls: list[tuple[str, str]] = []

    @staticmethod
    def _select(ads, constraint):
        import classad2
        expr = classad2.ExprTree(constraint)
        return [ad for ad in ads if expr.eval(ad) is True]

    def query(self, constraint="true", projection=None, **kw):
        self.calls.append(("query", constraint))
        return self._select(self.queue, constraint)

    def history(self, constraint, projection=None, match=-1, **kw):
        self.calls.append(("history", constraint))
        return self._select(self.history_ads, constraint)[:match if match > 0 else None]


class RecordedCollector:
    """htcondor2's Collector answering ``query(ad_type)`` with the ads recorded for that type
    (a function giving the ClassAds: parsed when asked); any other type fails the test.
    ``calls`` keeps (ad_type, projection)."""

    def __init__(self, ads: Mapping[Any, Callable[[], list]]):
        self.ads = ads
        self.calls: list[tuple[Any, Any]] = []

    def query(self, ad_type, constraint=None, projection=None, statistics=None):
        self.calls.append((ad_type, projection))
        if ad_type not in self.ads:
            raise UnexpectedCall(f"no ads recorded for Collector.query({ad_type!r}); recorded: {list(self.ads)}")
        return self.ads[ad_type]()
