"""``python -m context_os``: the ``ctxos`` command, for an environment whose scripts are not on PATH."""

from .cli import main

if __name__ == "__main__":
    main()
