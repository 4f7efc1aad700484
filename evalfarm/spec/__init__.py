"""What to ask, whom, how to score and what must hold: the spec's models and how files become them.

``models`` (frozen pydantic models), ``sourcemap`` (YAML with line numbers), ``validation``
(pydantic errors as one line), ``dataset`` and ``cases`` (JSONL and case YAML), ``prompts``
(the versioned prompt store), ``source`` (the prompts a run asks), ``load`` (a spec file),
``binding`` (endpoints from flags and the environment).
"""
from .binding import bind_environment
from .load import SpecFile, load_spec, open_spec, parse_spec, source_for, spec_from_cases
from .models import (AdapterSpec, Check, Criterion, EvalSpec, JudgeSpec, Price, PromptSpec, Thresholds,
                     FORMAT_CHECKS)
from .source import PromptSource

__all__ = ["AdapterSpec", "Check", "Criterion", "EvalSpec", "JudgeSpec", "Price", "PromptSpec", "Thresholds",
           "FORMAT_CHECKS", "PromptSource", "SpecFile", "bind_environment", "load_spec", "open_spec", "parse_spec",
           "source_for", "spec_from_cases"]
