"""Response-style profiles: the addendum each A/B arm adds as the system prompt.

``baseline`` adds nothing. ``control`` is the built-in minimal "be brief" arm that
``--arms 3`` runs to separate the effect of *any* brevity instruction from the
candidate profile's own wording. Every addendum is hashed (SHA-256 of its UTF-8
bytes) into the comparison artifact, so a changed text is a different comparison.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..canonical import sha256_hex
from ..errors import UsageError


@dataclass(frozen=True)
class Profile:
    name: str
    addendum: str | None  # None: no system prompt at all

    @property
    def addendum_sha256(self) -> str | None:
        return sha256_hex(self.addendum) if self.addendum is not None else None

    def describe(self) -> dict:
        return {"name": self.name, "addendum_sha256": self.addendum_sha256,
                "addendum_chars": len(self.addendum) if self.addendum is not None else 0}


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("baseline", None),
    Profile("balanced", "Answer the question completely but without filler. Put the answer first, "
                        "then only the reasoning a reader needs to trust it."),
    Profile("terse", "Be terse. Reply with the answer only: no preamble, no explanation, "
                     "no restating of the question."),
    Profile("verbose", "Be thorough. Explain your reasoning step by step, state your assumptions "
                       "and give an example where it helps."),
)}

# The control arm: the smallest possible brevity instruction, not selectable by name.
CONTROL = Profile("control", "Be brief.")


def profile(name: str) -> Profile:
    """A selectable profile by name; unknown names are a usage error (exit 2)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}") from None


def by_addendum(addendum: str | None) -> Profile | None:
    """The profile (control included) whose addendum is exactly ``addendum``."""
    for p in (*PROFILES.values(), CONTROL):
        if p.addendum == addendum:
            return p
    return None
