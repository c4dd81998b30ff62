"""The model's shared pieces: the strict base every block derives from, and the small types several domains use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from aisite.catalog import GPU_TYPES, KNOWN_MODELS
from aisite.fields import (
    DnsLabel,
)

SSH_KEY = r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( .*)?$"

SshKey = Annotated[str, Field(pattern=SSH_KEY)]


def known_server_model(value: str) -> str:
    if value not in KNOWN_MODELS:
        raise ValueError(f"unknown GPU server model {value!r}; known: {', '.join(KNOWN_MODELS)}")
    return value


def known_gpu_type(value: str) -> str:
    if value not in GPU_TYPES:
        raise ValueError(f"unknown GPU type {value!r}; known: {', '.join(GPU_TYPES)}")
    return value


Name = DnsLabel

Count = Annotated[int, Field(ge=0, le=100_000)]

Percent = Annotated[int, Field(ge=0, le=100)]


class Strict(BaseModel):
    # Numbers are finite: `.inf` or `.nan` would reach plan JSON as Infinity/NaN.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)


Ratio = Annotated[float, Field(ge=1, le=64)]

GpuCount = Annotated[int, Field(ge=0, le=10_000_000)]

Share = Annotated[float, Field(ge=0, le=1)]

GpuTypeKey = Annotated[str, AfterValidator(known_gpu_type)]

Fraction = Annotated[float, Field(gt=0, le=1)]

Bandwidth = Annotated[float, Field(gt=0, le=1e6)]


def member_names(pattern: str, count: int, given: Sequence[str | None]) -> list[str]:
    """A group's members by name: its pattern numbered from 1, each one named in its `nodes` list (the first
    `count`) by that name instead."""
    names = [pattern.format(n=i + 1) for i in range(count)]
    for i, name in enumerate(given[:count]):
        if name:
            names[i] = name
    return names
