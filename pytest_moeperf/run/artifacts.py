"""What a session's servers run: llama.cpp builds (by number, built and cached on first use,
or a user's binary) and model files (a synthetic GGUF generated on first use), each resolved
once per session, with what is read from a model file once (its tensor table, its digest)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from ..config.profiles import Configuration, HostLacks, Profile
from ..errors import ConfigError, ModelError, MoeperfError
from ..host.machine import file_digest
from ..llama.build import Build, binary_build, build_llama, cuda_cmake_args, label_number
from ..llama.model_bytes import DecodeBytes, decode_bytes, model_shards
from ..llama.synthetic_gguf import ensure_model
from ..llama.synthetic_model import model_spec
from .options import Options

SYNTHETIC = "synthetic:"
MODEL_DIGEST_BYTES = 16 << 20
"""The model fingerprint hashes the first 16 MiB of its first file (and records the size of
all its files and how many there are): cheap for 100 GB."""


def said_as(build: Build, label: str, where: str) -> Build:
    """*build*, whose ``--version`` must say the build number *label* names (``b11713``):
    a binary that prints another is a :class:`ConfigError` naming both, never numbers of one
    build kept under another's name (a label that names no number, ``pr-29887``, and a binary
    built without its number, build 0, are taken as they are)."""
    number = label_number(label)
    if number is not None and build.number is not None and build.number != number:
        raise ConfigError(
            f"{where}: {build.server} prints build {build.number} (--version), not {label}: "
            f"point it at llama-server {label}, or judge b{build.number} as a candidate "
            f"(--moeperf-candidate={build.server})"
        )
    return build


def stand_in_for(
    options: Options,
    profile: Profile,
    configuration: Configuration,
    binary: Callable[[str], Build] = binary_build,
) -> tuple[str, Build] | None:
    """The label and build of ``--llama-server`` (or its ini and variable) where it stands in
    for *profile*'s own build on *configuration* (one that names no build or binary of its
    own), held to that build by :func:`said_as`; ``None`` where it does not stand in."""
    if (
        options.llama_server is None
        or configuration.build is not None
        or configuration.binary is not None
    ):
        return None
    path, origin = options.llama_server
    build = binary(str(path))
    own = profile.build_label
    if own is not None:
        said_as(build, own, f"{origin} {path} for profile {profile.name!r}")
    return own or build.label, build


def stand_in_checked(options: Options, uses: Iterable[tuple[Profile, Configuration]]) -> None:
    """:func:`stand_in_for` each of *uses* before any test runs, so that a stand-in of another
    build is one :class:`ConfigError`, not one failure a test."""
    for profile, configuration in uses:
        stand_in_for(options, profile, configuration)


class Artifacts:
    """Builds and models of a session, resolved once each."""

    def __init__(self, settings: Options, progress: Callable[[str], None]) -> None:
        self.options = settings
        self.progress = progress
        self._builds: dict[tuple[str, str], Build] = {}
        self._models: dict[str, Path] = {}
        self._decode_bytes: dict[Path, DecodeBytes | None] = {}
        self._model_digests: dict[Path, str] = {}
        self._model_files: dict[Path, tuple[Path, ...]] = {}

    def build_for(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> tuple[str, Build]:
        """The label and build a configuration runs on.

        Without *label*: the user's binary (``--llama-server``, ``llama_server`` ini,
        ``LLAMA_SERVER``) first, else the configuration's, else the profile's binary or build
        number (built on first use). With *label* (``b11053``): that entry of the profile's
        ``builds`` table, or the profile's own build when the label is its own."""
        if label is not None and label != profile.build_label:
            target = profile.builds.get(label)
            if target is None:
                known = ", ".join([*(b for b in [profile.build_label] if b), *profile.builds])
                raise ConfigError(
                    f"profile {profile.name!r} ({profile.source}) has no build {label!r}; "
                    f"known: {known or 'none'} (add it to the profile's builds table)"
                )
            if isinstance(target, int):
                return label, self.built(target, profile)
            build = self.binary(str(profile.path(target, self.options.rootdir)))
            where = f"profile {profile.name!r} ({profile.source}): builds.{label}"
            return label, said_as(build, label, where)
        stood_in = stand_in_for(self.options, profile, configuration, self.binary)
        if stood_in is not None:
            return stood_in
        binary = configuration.binary or (None if configuration.build else profile.binary)
        if binary:
            build = self.binary(str(profile.path(binary, self.options.rootdir)))
            own = profile.build_label if not configuration.binary else None
            if own is not None:
                said_as(build, own, f"profile {profile.name!r} ({profile.source}): binary")
            return own or build.label, build
        number = configuration.build or profile.build
        if number is None:
            raise ConfigError(
                f"{profile.source}: profile {profile.name!r} names neither build nor binary; "
                'add build = 11434 or binary = "/path/to/llama-server"'
            )
        return f"b{number}", self.built(number, profile)

    def built(self, number: int, profile: Profile) -> Build:
        args = [*(cuda_cmake_args() if profile.cuda else ()), *profile.cmake_args]  # yours win
        key = (f"b{number}", " ".join(args))
        if key not in self._builds:
            self._builds[key] = build_llama(number, args, progress=self.progress)
        return self._builds[key]

    def binary(self, path: str) -> Build:
        key = (path, "")
        if key not in self._builds:
            self._builds[key] = binary_build(path)
        return self._builds[key]

    def model_for(self, profile: Profile) -> Path:
        """The model file of *profile*; a ``synthetic:PRESET`` model is generated on first use."""
        ref = profile.model
        if ref not in self._models:
            if ref.startswith(SYNTHETIC):
                spec = model_spec(ref[len(SYNTHETIC) :], **profile.model_overrides)
                self._models[ref] = ensure_model(spec, progress=self.progress)
            else:
                path = profile.path(ref, self.options.rootdir)
                if not path.is_file():
                    raise HostLacks(
                        f"profile {profile.name!r} ({profile.source}): model file {path} "
                        "is not on this host",
                        "model",
                    )
                try:  # a split model: named by its first shard, every shard beside it
                    self._model_files[path] = model_shards(path)
                except ModelError as exc:
                    raise HostLacks(
                        f"profile {profile.name!r} ({profile.source}): model {exc}", "model"
                    ) from None
                self._models[ref] = path
        return self._models[ref]

    def model_bytes(self, model: Path) -> DecodeBytes | None:
        """The tensor table's counts of *model* (read once; ``None``: not a readable GGUF)."""
        if model not in self._decode_bytes:
            try:
                self._decode_bytes[model] = decode_bytes(model)
            except MoeperfError:
                self._decode_bytes[model] = None
        return self._decode_bytes[model]

    def model_files(self, model: Path) -> tuple[Path, ...]:
        """The files of *model*: every shard of a split model (``NAME-00001-of-00003.gguf``),
        else the file itself (also when a shard cannot be found: the server's load says so)."""
        if model not in self._model_files:
            try:
                self._model_files[model] = model_shards(model)
            except MoeperfError:
                self._model_files[model] = (model,)
        return self._model_files[model]

    def model_size(self, model: Path) -> int:
        """Bytes of all of *model*'s files."""
        return sum(p.stat().st_size for p in self.model_files(model))

    def model_digest(self, model: Path) -> str:
        """sha256 of the first :data:`MODEL_DIGEST_BYTES` of *model* (read once per file)."""
        if model not in self._model_digests:
            self._model_digests[model] = file_digest(model, MODEL_DIGEST_BYTES)
        return self._model_digests[model]
