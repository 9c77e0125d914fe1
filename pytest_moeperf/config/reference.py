"""A profile's recorded reference: the baseline file its ``reference`` key names (ADR-0042's
tables), read as a :class:`~pytest_moeperf.verdicts.reference.Reference` for the session's
rows and the dashboard's pages alike."""

from __future__ import annotations

from pathlib import Path

from ..errors import BaselineError, ConfigError
from ..store.baselines import load_baselines
from ..verdicts.reference import DEFAULT_LABEL, Reference
from .profiles import Profile


def profile_reference(profile: Profile, rootdir: Path) -> Reference | None:
    """*profile*'s recorded reference (its ``reference`` baseline file), or ``None`` when it
    names none; a missing or invalid file is a :class:`ConfigError` naming the profile's key and
    the file."""
    if profile.reference is None:
        return None
    key = f"{profile.source}: profile {profile.name!r}: reference = {profile.reference!r}"
    path = profile.path(profile.reference, rootdir)
    if not path.is_file():
        raise ConfigError(
            f"{key}: no such baseline file {path}; point it at a baseline file "
            "(baselines/*.toml) or remove the key"
        )
    try:
        bf = load_baselines(path)
    except BaselineError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return Reference(
        label=profile.reference_label or DEFAULT_LABEL,
        path=profile.reference,
        entries=bf.entries,
        hosts=tuple(h.id for h in bf.hosts),
        profile=profile.name,
    )
