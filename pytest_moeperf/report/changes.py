"""``moeperf changes``' text: the change points of a store's series, each with its builds, its
interval, the hosts that show it and the bisect that names the first bad build."""

from __future__ import annotations

from collections.abc import Sequence

from ..verdicts.series import Found, Series


def changes_text(store: str, series: Sequence[Series], found: Sequence[Found]) -> str:
    hosts = len({s.host for s in series})
    lines = [
        f"store {store}: {len(series)} series of {hosts} host(s), {len(found)} change point(s)"
    ]
    for f in found:
        lines.append(f"{f.id} {f.series.name}: {f.change.describe()}")
        if not f.change.host and f.also:  # (the host's change says so in its line)
            lines.append(f"  also on {', '.join(f.also)}: every host's change, not one host's")
        elif not f.change.host and hosts > 1:
            lines.append("  on this host only")
        if f.mark is not None:
            lines.append(f"  {f.mark.describe()}")
        elif f.alarms:
            lines.append(
                "  after the last accepted baseline, not triaged (moeperf changes ack|invalid|"
                f"fixed {f.id} --note ...)"
            )
        if f.bisect:
            lines.append(f"  bisect: {f.bisect}")
    return "\n".join(lines)
