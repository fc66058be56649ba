"""The commands of ``simfl``, one module each: its help, its arguments and what it does.

Each module has ``HELP`` (a line for ``simfl --help``), ``DESCRIPTION`` (for ``simfl CMD
--help``), ``arguments(parser)`` (adds its arguments and sets ``func``) and ``command(args)``
(runs it and returns the exit status).
"""
