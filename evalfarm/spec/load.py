"""Loading a spec file: YAML with line numbers, the model, its dataset, merged prompts.

``open_spec(path)`` validates the YAML, the dataset it names and the merged prompt list
before anything runs (bad input stops here, one line naming file, line and field), and
returns a ``SpecFile``: the frozen spec, where it came from, and its ``PromptSource``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import SpecError
from ..names import label_problem, printable
from .cases import load_cases
from .dataset import check_duplicates, is_case_yaml, iter_jsonl, load_any
from .models import AdapterSpec, EvalSpec, JudgeSpec
from .source import PromptSource
from .sourcemap import check_regular_file, dotted, line_for, load_yaml, read_text
from .suite import is_suite, suite_spec
from .validation import spec_error


HOLD_BYTES = 4 << 20  # JSONL datasets up to this size are held after validation, larger ones streamed


@dataclass(frozen=True)
class SpecFile:
    """A validated spec, the file it came from (for error lines) and the prompts it asks."""

    spec: EvalSpec
    source: PromptSource
    path: Path | None = None
    lines: dict = field(default_factory=dict, compare=False, repr=False)

    def where(self, *loc: Any) -> dict[str, Any]:
        """``SpecError`` keyword arguments pointing at ``loc`` in the file (path and line)."""
        return {"path": str(self.path) if self.path else None,
                "line": line_for(self.lines, loc) if self.lines else None}

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def with_spec(self, spec: EvalSpec) -> "SpecFile":
        return SpecFile(spec, self.source, self.path, self.lines)

    def with_source(self, source: PromptSource) -> "SpecFile":
        return SpecFile(self.spec, source, self.path, self.lines)


def parse_spec(data: Any, *, path: Path, lines: dict | None = None) -> EvalSpec:
    """Validate already-parsed YAML data into an EvalSpec with file:line errors."""
    if not isinstance(data, dict):
        raise SpecError("the spec must be a YAML mapping with at least 'name' and 'adapters'",
                        path=str(path), line=1)
    try:
        return EvalSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, EvalSpec, str(path), lines) from None
    except RecursionError:
        raise SpecError("nested too deeply", path=str(path)) from None


def source_for(spec: EvalSpec, base_dir: Path, spec_path: Path | None = None,
               lines: dict | None = None) -> PromptSource:
    """The spec's prompts: inline, then its dataset (relative to ``base_dir``), checked for
    duplicate ids; a JSONL dataset is validated now and streamed later."""
    where = str(spec_path) if spec_path else "spec"
    origins = [(p, where, line_for(lines or {}, ("prompts", i, "id"))) for i, p in enumerate(spec.prompts)]
    dataset_line = line_for(lines or {}, ("dataset",)) if lines else None
    if not spec.dataset:
        if not spec.prompts:
            raise SpecError("the spec needs inline 'prompts' or a 'dataset'", path=where, line=1)
        return PromptSource(inline=tuple(spec.prompts), count=check_duplicates(origins))
    ds_path = base_dir / spec.dataset
    check_regular_file(ds_path, "dataset file", where, dataset_line, "dataset")
    if is_case_yaml(ds_path):
        loaded = load_any(ds_path)
        count = check_duplicates(origins + loaded)
        source = PromptSource(inline=tuple(spec.prompts), loaded=tuple(p for p, _, _ in loaded), count=count)
    elif ds_path.stat().st_size <= HOLD_BYTES:  # a small JSONL dataset: validated once and held
        loaded = list(iter_jsonl(ds_path, spec_path))
        count = check_duplicates(origins + loaded)
        source = PromptSource(inline=tuple(spec.prompts), loaded=tuple(p for p, _, _ in loaded), count=count)
    else:  # a big JSONL: validate it all now (bad input stops here), keep only the ids; re-read when planning
        count = check_duplicates(itertools.chain(origins, iter_jsonl(ds_path, spec_path)),
                                 again=lambda: itertools.chain(origins, iter_jsonl(ds_path, spec_path)))
        source = PromptSource(inline=tuple(spec.prompts), stream=ds_path, count=count)
    if not count:
        raise SpecError("no prompts: the dataset is empty and there are no inline prompts",
                        path=where, line=dataset_line, field="dataset")
    return source


def open_spec(path: Path | str) -> SpecFile:
    """Load and fully validate a spec file (or a spawn suite, spec/suite.py), its dataset and merged
    prompts, and that agents and a workspace go together. Pinning the workspace to a commit runs git:
    ``agents.workspace.pin_spec_file`` does it, in ``runs/`` (the spec layer runs nothing)."""
    path = Path(path)
    data, lines = load_yaml(read_text(path), path)
    if is_suite(data):
        spec, lines = suite_spec(data, path, lines)
    else:
        spec = parse_spec(data, path=path, lines=lines)
    sf = SpecFile(spec, source_for(spec, path.parent, path, lines), path, lines)
    problem = spec.spawn_problem()
    if problem is not None:
        loc, message = problem
        raise SpecError(message, field=dotted(loc), **sf.where(*loc))
    return sf


def load_spec(path: Path | str) -> EvalSpec:
    """The Python API: the validated, frozen spec. Its dataset path is made absolute, so
    ``Runner().run(spec)`` finds the prompts from any working directory."""
    sf = open_spec(path)
    if sf.spec.dataset is None:
        return sf.spec
    return sf.spec.model_copy(update={"dataset": str((sf.base_dir / sf.spec.dataset).resolve())})


def spec_from_cases(paths: list[Path], model: str, judge_model: str | None = None,
                    name: str | None = None) -> SpecFile:
    """The seed's ``run --dataset cases.yaml --model M``: one OpenAI-compatible adapter and, when
    any case has criteria, a judge (``--judge-model``, default the model itself)."""
    origins = load_cases(paths)
    check_duplicates(origins)
    prompts = tuple(p for p, _, _ in origins)
    if not prompts:
        raise SpecError("no cases in " + ", ".join(str(p) for p in paths) + "; add at least one case with "
                        "id and input", path=str(paths[0]) if paths else None)
    if name is None:  # named after the files, shown escaped if a file name holds a control character
        name = printable("+".join(p.stem for p in paths)).strip()[:200]
        name = "cases" if label_problem(name) else name
    try:
        judge = JudgeSpec(model=judge_model or model) if any(p.criteria for p in prompts) else None
        spec = EvalSpec(name=name, adapters=[AdapterSpec(id=model, model=model)], prompts=list(prompts), judge=judge)
    except ValidationError as exc:  # --model / --judge-model values
        err = exc.errors()[0]
        raise SpecError(f"--model/--judge-model: {err['msg'].removeprefix('Value error, ')}") from None
    return SpecFile(spec, PromptSource(inline=prompts, count=len(prompts)))
