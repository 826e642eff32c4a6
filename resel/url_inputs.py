"""Inputs given as URLs (``osdf://``, ``https://``, …): left to the site that runs the task.

A bag's input may be a URL instead of a file (docs/data.md). resel never fetches, checks or
hashes it: an HTCondor pilot carries it in its ``transfer_input_files``, so the pool's
transfer plugins fetch it into the slot before the pilot starts (OSDF, HTTP, S3, …), and the
chirp wrapper puts it into the slot's cache, from where the agent links it into each task's
folder under its name. On every other site resel fetches nothing; the site's ``setup`` lines
are where a user fetches it.

The rules live here, in one place: :mod:`resel.config` refuses a URL that cannot work when the
bag is read, and the HTCondor backend checks again before anything reaches a submit file.
Standard library only (the pure core imports it).
"""

from __future__ import annotations

import re

__all__ = ["is_url", "url_file_name", "url_problem"]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: names in an HTCondor slot's scratch directory that are the pilot's own (with ``resel-*``:
#: the agent, the chirp wrapper and its log)
RESERVED = ("pilot", "cache")
#: what a URL's file name may be made of (HTCondor saves the file under it, in the slot)
FILE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")


def is_url(text: str) -> bool:
    """Whether an input is a URL (``scheme://…``) rather than a path or glob."""
    return isinstance(text, str) and _SCHEME.match(text) is not None


def url_file_name(url: str) -> str:
    """The name HTCondor's file transfer gives a URL input in the slot: the last part of the
    URL's path, without its query or fragment (seen in the testbed's HTCondor 23.9.6 pool:
    ``file:///tmp/a.dat?x=1`` arrives as ``a.dat``). ``""`` when the path names no file.
    The chirp wrapper (:func:`resel.shipped.chirp_sync.url_file_name`) computes the same."""
    path = url.split("#", 1)[0].split("?", 1)[0]
    if "://" in path:
        path = path.split("://", 1)[1]
        path = path[path.find("/"):] if "/" in path else ""
    return path.rsplit("/", 1)[-1]      # "" for a path ending in "/" (a folder, no file)


def url_problem(url: str) -> str | None:
    """Why a URL cannot be an input (None: it can). It travels in ``transfer_input_files``, a
    list split at commas and blanks, so neither may be in it; it has no ``{index}``/``{name}``
    (a URL is the same for every task); and its file name must be plain, because the file
    arrives under that name."""
    if not is_url(url):
        return "not a URL (scheme://...)"
    if any(ord(c) < 32 or ord(c) == 127 or c in ", " for c in url):
        return "commas, blanks and control characters cannot be in a URL input (HTCondor splits its list at them)"
    if "{" in url or "}" in url:
        return "a URL input is the same for every task: no {index} or {name} in it"
    name = url_file_name(url)
    if not name or name in (".", "..") or not set(name) <= FILE_CHARS:
        return (f"its file name {name!r} (the last part of its path) must be a plain name of letters, digits "
                "and ._+- (the site saves the file under it)")
    if name in RESERVED or name.startswith("resel-"):
        return f"its file name {name!r} is one an HTCondor pilot uses itself (resel-*, {', '.join(RESERVED)})"
    return None
