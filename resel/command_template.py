"""A bag's command template: a shell command in which resel fills in only its own placeholders.

The command is run by a shell on the compute node, so it is full of braces that belong to the
shell or to the programs it calls (``${HOME}``, ``awk '{print $1}'``, ``find -exec {} +``,
``docker inspect -f '{{.Id}}'``). resel therefore replaces exactly two placeholders and leaves
every other character alone:

* ``{index}`` — the task's number (0-based), optionally with a Python format spec after a
  colon, e.g. ``{index:04d}`` → ``0007``;
* ``{name}`` — the bag's name, shell-quoted when it holds anything but letters, digits and
  ``@%+=:,./-_`` (so a name can never inject shell syntax), optionally with a format spec.

To pass a placeholder through literally, double its braces: ``{{index}}`` becomes ``{index}``.
The same holds for what looks like a misspelt placeholder (``{{Index}}`` → ``{Index}``); no other
doubled brace is touched (``{{.Id}}`` stays ``{{.Id}}``).

:func:`problems` is the check run when a bag is read, so a template that cannot be what the
user meant fails there, with the reason, rather than at every dispatch of a live run.
"""

from __future__ import annotations

import difflib
import re
import shlex

PLACEHOLDERS = ("index", "name")

#: doubled braces first (an escape, or someone else's), then single ones
_BRACES = re.compile(r"\{\{([^{}]*)\}\}|\{([^{}]*)\}")
_PLACEHOLDER = re.compile(r"(index|name)(?::(.*))?", re.S)
_WORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*")
_NUMBER = re.compile(r"[0-9]+")
#: the widest a placeholder's format may make it (``{index:06d}`` needs 6): ``{index:999999999}``
#: would make every task's command a gigabyte
MAX_WIDTH = 1000


def _placeholder(inner: str) -> tuple[str, str] | None:
    """``(which, spec)`` if ``inner`` (the text between braces) is one of resel's placeholders."""
    match = _PLACEHOLDER.fullmatch(inner)
    return (match.group(1), match.group(2) or "") if match else None


def _too_wide(spec: str) -> bool:
    """Whether a format spec asks for a width or precision above :data:`MAX_WIDTH` (read as
    text: int() refuses numbers of over 4,300 digits)."""
    return any(len(n.lstrip("0")) > len(str(MAX_WIDTH)) or int(n) > MAX_WIDTH for n in _NUMBER.findall(spec))


def _misspelt(inner: str) -> str | None:
    """The placeholder ``inner`` is probably a misspelling of (``Index``, ``idx``, `` name ``)."""
    match = _WORD.fullmatch(inner)
    if match is None or _placeholder(inner):
        return None
    close = difflib.get_close_matches(match.group(1).lower(), PLACEHOLDERS, n=1, cutoff=0.75)
    return close[0] if close else None


def fill(template: str, index: int, name: str) -> str:
    """The command of task ``index`` of bag ``name``: placeholders filled, all else verbatim."""
    def one(match: re.Match) -> str:
        doubled, single = match.group(1), match.group(2)
        if doubled is not None:     # {{index}} -> {index}; {{.Id}} stays
            if _placeholder(doubled) or _misspelt(doubled):
                return "{" + doubled + "}"
            return match.group(0)
        found = _placeholder(single)
        if found is None:
            return match.group(0)
        which, spec = found
        if which == "index":
            return format(index, spec)
        return shlex.quote(format(name, spec))
    return _BRACES.sub(one, template)


def fill_path(template: str, index: int, name: str) -> str:
    """A path pattern of task ``index`` (a bag's ``inputs``): the placeholders filled in as
    :func:`fill` does, but the bag's name verbatim (a path is no shell word) and every filled-in
    value escaped for :mod:`glob`, so a name holding ``*`` or ``[`` matches only itself."""
    import glob

    def one(match: re.Match) -> str:
        doubled, single = match.group(1), match.group(2)
        if doubled is not None:
            if _placeholder(doubled) or _misspelt(doubled):
                return "{" + doubled + "}"
            return match.group(0)
        found = _placeholder(single)
        if found is None:
            return match.group(0)
        which, spec = found
        return glob.escape(format(index if which == "index" else name, spec))
    return _BRACES.sub(one, template)


def problems(template: str) -> list[str]:
    """Why ``template`` cannot be what its author meant (empty: it is fine).

    * ``${index}``/``${name}``: ambiguous between a shell variable and resel's placeholder;
    * ``${{``: the escape of resel versions that filled commands with ``str.format`` (bash
      rejects ``${{``);
    * a format spec that does not fit (``{index:q}``);
    * ``{idx}``, ``{Index}``, ``{ name }``: a misspelt placeholder, which the shell would get
      unchanged.
    """
    found: list[str] = []
    if "${{" in template:
        found.append("'${{' is the brace escape of older resel versions; resel now leaves shell braces "
                     "alone, so write '${' (e.g. ${HOME})")
    for match in _BRACES.finditer(template):
        single = match.group(2)
        if single is None:
            continue
        text = match.group(0)
        dollar = match.start() > 0 and template[match.start() - 1] == "$"
        placeholder = _placeholder(single)
        if placeholder is not None:
            which, spec = placeholder
            if dollar:
                found.append(f"'${text}' is ambiguous: write '{text}' for resel's {_WHAT[which]}, or "
                             f"'${which}' for the shell variable")
            elif _too_wide(spec):
                found.append(f"'{text}': a width or precision above {MAX_WIDTH:,} would make every task's "
                             "command that long")
            elif spec:
                try:
                    format(7 if which == "index" else "bag", spec)
                except (ValueError, TypeError) as exc:
                    found.append(f"'{text}': format spec {spec!r} does not fit ({exc})")
            continue
        close = None if dollar else _misspelt(single)
        if close:
            found.append(f"unknown placeholder '{text}': did you mean '{{{close}}}'? (resel fills in only "
                         f"{{index}} and {{name}}; write '{{{text}}}' to pass '{text}' to the shell)")
    return found


_WHAT = {"index": "task index", "name": "bag name"}
