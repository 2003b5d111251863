"""``docs/options.md``, written from the option table so the page cannot drift from the parsers:

    python -m llmload.options.docs > docs/options.md

(``tests/unit/test_options.py`` fails when the committed page differs from what this prints.)
"""

from __future__ import annotations

import math

from llmload.options.spec import GROUPS, Option, Scope
from llmload.options.table import OPTIONS

_INTRO = """\
# Options

Every llmload option is declared once, in `llmload/options/table.py`; `llmload bench`'s flags, the options
`locust -f` takes (through llmload's Locust plugin) and this page are all generated from that table
(`python -m llmload.options.docs > docs/options.md`). An option both take has the same name, type, choices and
default in both.

- **bench**: `llmload bench` takes it as a flag. bench takes flags only: it reads none of the option
  variables below (a stray `LLMLOAD_*` in a CI environment cannot change a benchmark).
- **locust**: `locust -f locustfiles/...` takes it as a flag, from its environment variable, from a Locust
  config file (`locust.conf`: `request-rate = 10`), and, unless marked *not in the form*, in the web UI's start
  form. List-valued options take a list in the variable: `LLMLOAD_GOODPUT="[ttft:500, tpot:50]"`; flags take
  `true`: `LLMLOAD_IGNORE_EOS=true`.

Locust's own options (`--host`, `-u`, `-r`, `-t`, `--processes`, `--master`, `--worker`, `--master-host`,
`--master-port`, `--expect-workers`, `--stop-timeout`, ...) are Locust's: llmload adds none of the same name.

## The API key

No flag takes the key itself: `ps` shows every command line to every user of the host. `locust -f` takes it,
in this order (`llmload.options.api_key`), from the *API key* field of the web UI's start form (a password
field with no command-line flag: `--api-key KEY` is refused with a one-line error), `--api-key-file FILE`,
`$LLMLOAD_API_KEY`, `$OPENAI_API_KEY`. `llmload bench` takes `--api-key-file FILE`, else `$OPENAI_API_KEY`.
`api_key` refuses an unreadable, empty or multi-line key file with one line that names the file, never its
content.

Other variables: `LLMLOAD_CLUSTER_TOKEN` (bench's master and workers, see [distributed.md](distributed.md)),
`LLMLOAD_DEBUG=1` (tracebacks), `LLMLOAD_READER` (`auto`, the default: the compiled reader where `pip install`
built it, else the Python one, said once at the start of the run; `python`: force the Python reader; `compiled`:
refuse to run without the compiled one, one line and exit 2; see [performance.md](performance.md)).
`LLMLOAD_NO_EXTENSIONS=1` at install time skips building the compiled reader. `LLMLOAD_SPILL_AFTER=N`: the values
a statistics column keeps in memory before it moves them to a temporary file (default 65,536; 0: every value to
disk; the percentiles stay exact either way, see [reliability.md](reliability.md), "Records journal"); anything but a
whole number is one line and exit 2 before the first request. `LLMLOAD_PART_S=S`: the seconds of the schedule each
part of a worker's share covers (default 30; a distributed open loop sends each part 15 s, at most half a part,
before it is due: [design.md](design.md), "A long run's share in parts"); anything but a number > 0 is one line and
exit 2 before the first request.
"""


def _default(option: Option) -> str:
    value = option.default
    if option.action == "store_true" or value is None or value == "":
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "`inf`"
    return f"`{value}`"


def _where(option: Option) -> str:
    ways = [name for scope, name in ((Scope.BENCH, "bench"), (Scope.LOCUST, "locust")) if scope in option.scope]
    text = ", ".join(ways)
    if not option.cli:
        text = "locust (form only)"
    elif Scope.LOCUST in option.scope and not option.web_ui:
        text += " (not in the form)"
    return text


def _help(option: Option) -> str:
    parts = []
    if option.choices:
        parts.append("one of " + ", ".join(f"`{c}`" for c in option.choices))
    first = option.help_for(Scope.BENCH if Scope.BENCH in option.scope else Scope.LOCUST)
    if first:
        parts.append(first.replace("%(default)s", str(option.default)))
    if option.scope == Scope.BOTH and option.locust_help is not None:
        parts.append(f"*locust -f*: {option.help_for(Scope.LOCUST)}")
    if option.secret:
        parts.append("secret: never shown")
    return "; ".join(parts).replace("|", "\\|")


def _row(option: Option) -> str:
    names = ", ".join(f"`{f}`" for f in option.flags)
    if option.metavar:
        names += f" `{option.metavar.replace('|', '/')}`"
    env = f"`{option.env_var}`" if option.env_var else ""
    return f"| {names} | {_where(option)} | {_default(option)} | {env} | {_help(option)} |"


def render() -> str:
    """The whole page, Markdown."""
    lines = [_INTRO]
    for key, title in GROUPS:
        members = [o for o in OPTIONS if o.group == key]
        if not members:
            continue
        lines += [f"## {title[0].upper()}{title[1:]}", "", "| option | ways in | default | locust variable | |",
                  "|---|---|---|---|---|"]
        lines += [_row(o) for o in members]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
