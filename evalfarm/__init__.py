"""evalfarm: a distributed eval farm for LLM prompts, models and coding agents.

    from evalfarm import load_spec, Runner, save_report
    report = Runner().run(load_spec("suite.yaml"))
"""
from .artifacts import save_report
from .errors import EvalfarmError, SpecError
from .report import RunReport
from .runner import Runner
from .spec import EvalSpec, PromptSpec, load_spec

__all__ = ["load_spec", "Runner", "save_report", "RunReport", "EvalSpec", "PromptSpec", "SpecError",
           "EvalfarmError"]
__version__ = "0.1.0"
