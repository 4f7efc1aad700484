"""``python -m evalfarm.cli``: the same as the ``evalfarm`` command."""
from . import entry

entry()
