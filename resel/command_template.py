"""A bag's command template: a shell command in which resel fills in only its own placeholders.

The command is run by a shell on the compute node, so it is full of braces that belong to the
shell or to the programs it calls (``${HOME}``, ``awk '{print $1}'``, ``find -exec {} +``,
``docker inspect -f '{{.Id}}'``). resel therefore replaces exactly two placeholders and leaves
every other character alone:

* ``{index}`` — the task's number (0-based), optionally with a Python format spec after a
  colon, e.g. ``{index:04d}`` → ``0007``;
* ``{name}`` — the bag's name, shell-quoted when it holds anything but letters, digits and
  ``@%+=:,./-_`` (so a name can never inject shell syntax), optionally with a format spec.

A bag with a task table (docs/configuration.md, "Bags of unequal tasks") has three more, from
the task's row; in any other bag they are shell text like any brace:

* ``{task}`` — the task's name, shell-quoted as ``{name}`` is;
* ``{size}`` — its size, a whole number written without a decimal point (``{size:08.1f}``
  takes a format spec);
* ``{args}`` — its arguments, verbatim: shell words of the user's own, as the command is.

To pass a placeholder through literally, double its braces: ``{{index}}`` becomes ``{index}``.
The same holds for what looks like a misspelt placeholder (``{{Index}}`` → ``{Index}``); no other
doubled brace is touched (``{{.Id}}`` stays ``{{.Id}}``).

:func:`problems` is the check run when a bag is read, so a template that cannot be what the
user meant fails there, with the reason, rather than at every dispatch of a live run.

resel versions before this language filled commands with ``str.format`` (``{{`` and ``}}`` stood
for a brace: ``${{HOME}}`` for ``${HOME}``). A live run they stored is resumed with its command
in this language (:func:`from_format`), so its remaining tasks run what its first ones ran.
"""

from __future__ import annotations

import difflib
import re
import shlex
import string

PLACEHOLDERS = ("index", "name")
#: the placeholders of a bag with a task table: a row's name, size and arguments as well
ROW_PLACEHOLDERS = ("index", "name", "task", "size", "args")

#: doubled braces first (an escape, or someone else's), then single ones
_BRACES = re.compile(r"\{\{([^{}]*)\}\}|\{([^{}]*)\}")
_PLACEHOLDER = re.compile(r"(index|name|task|size|args)(?::(.*))?", re.S)
_WORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*")
_NUMBER = re.compile(r"[0-9]+")
#: the widest a placeholder's format may make it (``{index:06d}`` needs 6): ``{index:999999999}``
#: would make every task's command a gigabyte
MAX_WIDTH = 1000


def _placeholder(inner: str, names: tuple[str, ...] = PLACEHOLDERS) -> tuple[str, str] | None:
    """``(which, spec)`` if ``inner`` (the text between braces) is one of ``names``."""
    match = _PLACEHOLDER.fullmatch(inner)
    return (match.group(1), match.group(2) or "") if match and match.group(1) in names else None


def _number(size: float) -> int | float:
    """A size as it is written: a whole number without its ``.0``."""
    return int(size) if float(size).is_integer() else size


def _too_wide(spec: str) -> bool:
    """Whether a format spec asks for a width or precision above :data:`MAX_WIDTH` (read as
    text: int() refuses numbers of over 4,300 digits)."""
    return any(len(n.lstrip("0")) > len(str(MAX_WIDTH)) or int(n) > MAX_WIDTH for n in _NUMBER.findall(spec))


def _misspelt(inner: str, names: tuple[str, ...] = PLACEHOLDERS) -> str | None:
    """The placeholder ``inner`` is probably a misspelling of (``Index``, ``idx``, `` name ``)."""
    match = _WORD.fullmatch(inner)
    if match is None or _placeholder(inner, names):
        return None
    close = difflib.get_close_matches(match.group(1).lower(), names, n=1, cutoff=0.75)
    return close[0] if close else None


#: a task's row as the templates read it: (task name, size, arguments)
Row = tuple[str, float, str]


def fill(template: str, index: int, name: str, row: Row | None = None) -> str:
    """The command of task ``index`` of bag ``name``: placeholders filled, all else verbatim.
    ``row`` (a bag with a task table): the task's name, size and arguments, for ``{task}``,
    ``{size}`` and ``{args}``."""
    names = PLACEHOLDERS if row is None else ROW_PLACEHOLDERS

    def one(match: re.Match) -> str:
        doubled, single = match.group(1), match.group(2)
        if doubled is not None:     # {{index}} -> {index}; {{.Id}} stays
            if _placeholder(doubled, names) or _misspelt(doubled, names):
                return "{" + doubled + "}"
            return match.group(0)
        found = _placeholder(single, names)
        if found is None:
            return match.group(0)
        which, spec = found
        if which == "index":
            return format(index, spec)
        if which == "size":
            return format(_number(row[1]), spec)
        if which == "args":
            return format(row[2], spec)
        return shlex.quote(format(name if which == "name" else row[0], spec))
    return _BRACES.sub(one, template)


def fill_path(template: str, index: int, name: str, row: Row | None = None) -> str:
    """A path pattern of task ``index`` (a bag's ``inputs``): the placeholders filled in as
    :func:`fill` does, but names verbatim (a path is no shell word) and every filled-in
    value escaped for :mod:`glob`, so a name holding ``*`` or ``[`` matches only itself."""
    import glob
    names = PLACEHOLDERS if row is None else ROW_PLACEHOLDERS

    def one(match: re.Match) -> str:
        doubled, single = match.group(1), match.group(2)
        if doubled is not None:
            if _placeholder(doubled, names) or _misspelt(doubled, names):
                return "{" + doubled + "}"
            return match.group(0)
        found = _placeholder(single, names)
        if found is None:
            return match.group(0)
        which, spec = found
        value = {"index": index, "name": name}.get(which)
        if value is None:
            value = row[0] if which == "task" else _number(row[1]) if which == "size" else row[2]
        return glob.escape(format(value, spec))
    return _BRACES.sub(one, template)


def from_format(template: str, name: str) -> str | None:
    """``template`` as resel versions that filled it with ``str.format`` read it (``{{``/``}}``
    a brace, ``{index}`` and ``{name}`` filled, the name unquoted), written in today's language:
    the template :func:`fill` turns into the same command for every task — checked on sample
    indices — or None where there is none (a field other than the two, a name that today's
    quoting would change, braces that cannot be written so).
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return None
    out, literal = [], ""                # parse splits a literal at each escaped brace: join them
    for text, field, spec, conversion in parts:
        literal += text
        if field is None:
            continue
        if field not in PLACEHOLDERS or conversion:
            return None
        out += [_BRACES.sub(_kept, literal), "{" + field + (":" + spec if spec else "") + "}"]
        literal = ""
    converted = "".join(out) + _BRACES.sub(_kept, literal)
    for index in (0, 7, 12345):
        try:
            before = template.format(index=index, name=name)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError):
            return None
        if fill(converted, index, name) != before:
            return None
    return converted


def _kept(match: re.Match) -> str:
    """Literal text that :func:`fill` would change (a placeholder, single or doubled), written
    so that it comes out as it is: one more pair of braces around it."""
    doubled, single = match.group(1), match.group(2)
    inner = doubled if doubled is not None else single
    if _placeholder(inner) or (doubled is not None and _misspelt(doubled)):
        return "{" + match.group(0) + "}"
    return match.group(0)


def problems(template: str, table: bool = False) -> list[str]:
    """Why ``template`` cannot be what its author meant (empty: it is fine).

    * ``${index}``/``${name}``: ambiguous between a shell variable and resel's placeholder;
    * ``${{``: the escape of resel versions that filled commands with ``str.format`` (bash
      rejects ``${{``);
    * a format spec that does not fit (``{index:q}``);
    * ``{idx}``, ``{Index}``, ``{ name }``: a misspelt placeholder, which the shell would get
      unchanged.

    ``table``: the bag has a task table, so ``{task}``, ``{size}`` and ``{args}`` are
    placeholders too.
    """
    names = ROW_PLACEHOLDERS if table else PLACEHOLDERS
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
        placeholder = _placeholder(single, names)
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
                    format(7 if which in ("index", "size") else "bag", spec)
                except (ValueError, TypeError) as exc:
                    found.append(f"'{text}': format spec {spec!r} does not fit ({exc})")
            continue
        close = None if dollar else _misspelt(single, names)
        if close:
            which = "{index} and {name}" if not table else "{index}, {name}, {task}, {size} and {args}"
            found.append(f"unknown placeholder '{text}': did you mean '{{{close}}}'? (resel fills in only "
                         f"{which}; write '{{{text}}}' to pass '{text}' to the shell)")
    return found


_WHAT = {"index": "task index", "name": "bag name", "task": "task name", "size": "task size",
         "args": "task arguments"}
