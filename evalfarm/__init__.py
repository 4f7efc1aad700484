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


def load_plugins() -> None:
    """Import the modules named in EVALFARM_PLUGINS (comma-separated): they register adapters
    and judges. The coordinator and every worker must load the same plugins."""
    import importlib
    import os

    for name in filter(None, (m.strip() for m in os.environ.get("EVALFARM_PLUGINS", "").split(","))):
        importlib.import_module(name)

