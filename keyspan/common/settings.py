"""keyspan's settings in one object: ``keyspan.toml`` (in the working directory, or the file named
by ``KEYSPAN_CONFIG``), then ``KEYSPAN_*`` environment variables, then command-line flags, each
overriding the one before. Every field is listed in docs/configuration.md."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Optional

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource


def _env(name: str, *more: str) -> AliasChoices:
    """A field read as ``name`` from the file and as KEYSPAN_<NAME> (or an older variable) from the environment."""
    return AliasChoices(name, f"KEYSPAN_{name.upper()}", *more)


class KeyspanSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    workdir: str = Field(default_factory=lambda: os.path.join(os.getcwd(), ".keyspan"),
                         validation_alias=_env("workdir", "KEYSPAN_HOME"),
                         description="keyspan's local folder: metadata store, Spark offset logs, default "
                                     "checkpoints and savepoints, the API token")
    metadata_url: Optional[str] = Field(None, validation_alias=_env("metadata_url"),
                                        description="SQLAlchemy URL of the metadata store (default: SQLite in "
                                                    "the workdir)")
    checkpoint_dir: Optional[str] = Field(None, validation_alias=_env("checkpoint_dir"),
                                          description="checkpoint storage URI (default <workdir>/checkpoints)")
    savepoint_dir: Optional[str] = Field(None, validation_alias=_env("savepoint_dir"),
                                         description="default savepoint target URI (default <workdir>/savepoints)")
    spark_master: Optional[str] = Field(None, validation_alias=_env("spark_master"),
                                        description="Spark master URL (default local[N])")
    allow_local_storage: bool = Field(False, validation_alias=_env("allow_local_storage"),
                                      description="allow file:// checkpoint and savepoint locations with a "
                                                  "multi-host Spark master (only for a mount every host shares)")
    log_level: str = Field("INFO", validation_alias=_env("log_level"),
                           description="level of the `keyspan` loggers; Spark's log level follows")
    rest_bind: str = Field("127.0.0.1", validation_alias=_env("rest_bind"),
                           description="address the driver's API and dashboard listen on")
    rest_port: int = Field(0, validation_alias=_env("rest_port"),
                           description="port of the driver's API (0: a free port, recorded in the metadata store)")
    rest_token: Optional[str] = Field(None, validation_alias=_env("rest_token"),
                                      description="bearer token for mutating API calls (default: generated into "
                                                  "<workdir>/api-token)")
    rest_open_reads: bool = Field(True, validation_alias=_env("rest_open_reads"),
                                  description="allow read-only API calls without the token when the API "
                                              "listens on loopback")
    savepoint_key: Optional[str] = Field(None, validation_alias=_env("savepoint_key"),
                                         description="HMAC key that signs savepoint and checkpoint metadata "
                                                     "(default: generated into <workdir>/savepoint.key)")
    lease_seconds: float = Field(30.0, validation_alias=_env("lease_seconds"),
                                 description="how long a driver's claim on its job lasts without a heartbeat "
                                             "before another driver may take the job over")
    progress_every: int = Field(10, validation_alias=_env("progress_every"),
                                description="without a terminal, log one progress line every N epochs")

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings) -> tuple[PydanticBaseSettingsSource, ...]:
        path = os.environ.get("KEYSPAN_CONFIG") or os.path.join(os.getcwd(), "keyspan.toml")
        sources = [init_settings, env_settings]
        if os.path.isfile(path):
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


@lru_cache(maxsize=None)
def _cached(cwd: str, config: str | None, env_key: tuple) -> KeyspanSettings:
    return KeyspanSettings()


def load(**overrides) -> KeyspanSettings:
    """The settings now (file and environment re-read when they change), with ``overrides`` (CLI
    flags that were given; ``None`` means "not given") on top."""
    env_key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("KEYSPAN_")))
    base = _cached(os.getcwd(), os.environ.get("KEYSPAN_CONFIG"), env_key)
    given = {k: v for k, v in overrides.items() if v is not None}
    return base.model_copy(update=given) if given else base
