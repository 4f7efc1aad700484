"""Spec -> work items with stable content keys.

An item's key hashes everything that determines its result (prompt, adapter
config, trial index, judge config): same key = same work, so a redelivered task
overwrites its result instead of adding one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from .canonical import canonical_json, content_key
from .spec import EvalSpec, PromptSpec


@dataclass(frozen=True)
class Item:
    key: str
    prompt: PromptSpec
    adapter: str
    trial: int

    def to_json(self) -> str:
        return canonical_json({"key": self.key, "prompt": self.prompt.model_dump(),
                               "adapter": self.adapter, "trial": self.trial})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Item":
        return cls(key=data["key"], prompt=PromptSpec.model_validate(data["prompt"]),
                   adapter=data["adapter"], trial=data["trial"])


def item_key(prompt: PromptSpec, adapter_config: dict[str, Any], trial: int,
             judge_config: dict[str, Any] | None) -> str:
    return content_key({"prompt": prompt.model_dump(), "adapter": adapter_config,
                        "trial": trial, "judge": judge_config})


def iter_items(spec: EvalSpec, prompts: Iterable[PromptSpec], adapter_configs: dict[str, dict[str, Any]],
               judge_config: dict[str, Any] | None, trials: int | None = None) -> Iterator[Item]:
    """Items in a stable order: prompt, then adapter, then trial (one pass over the prompts)."""
    n_trials = trials or spec.trials
    for prompt in prompts:
        for adapter in spec.adapter_ids:
            for trial in range(n_trials):
                yield Item(item_key(prompt, adapter_configs[adapter], trial, judge_config),
                           prompt, adapter, trial)
