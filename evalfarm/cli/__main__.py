"""``python -m evalfarm.cli``: the same as the ``evalfarm`` command."""
from . import main

main()
