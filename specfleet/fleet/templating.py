"""The one jinja2 Environment that renders every template, and systemd's quoting of an Exec*= argument.

Each feature keeps its templates in its own `templates/` folder (`gateway/templates/haproxy.cfg.j2`); the loader
looks in all of them, so a template is named by its file name alone, and those names are unique across the package
(tests/unit/test_layers.py checks it). Package data: jinja2's PackageLoader finds them in a wheel install as in a clone.
"""

from __future__ import annotations

import re

import jinja2

from .programs import feature_folders

FOLDERS = feature_folders("templates")
# One environment per process: each template is compiled once (auto_reload off: package data does not change).
ENV = jinja2.Environment(loader=jinja2.ChoiceLoader([jinja2.PackageLoader("specfleet", f) for f in FOLDERS]),
                         undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                         auto_reload=False)


_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_SYSTEMD_ESCAPES = {"\\": "\\\\", '"': '\\"', "%": "%%", "$": "$$", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def systemd_word(arg: str) -> str:
    """One argument of an Exec*= line, as systemd.service(5) / systemd.syntax(7) parse it.

    Not shell quoting: systemd processes C escapes inside quotes too, expands %-specifiers and $VARIABLES.
    Plain words stay bare (`--ipc=host`); anything else is double-quoted with `\\` and `"` backslash-escaped,
    `%` doubled (specifier) and `$` doubled (variable); control characters (refused by validation anyway)
    become C escapes, so an argument can never end the line.
    """
    if _SYSTEMD_PLAIN.fullmatch(arg):
        return arg
    out = []
    for c in arg:
        if c in _SYSTEMD_ESCAPES:
            out.append(_SYSTEMD_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7f:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def systemd_args(args: list[str]) -> str:
    """Arguments joined for an Exec*= line, each rendered by systemd_word."""
    return " ".join(systemd_word(a) for a in args)
