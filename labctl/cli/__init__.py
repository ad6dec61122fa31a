"""The command line: one module per command group, each a thin layer over the library.

These modules do not use `from __future__ import annotations`: typer reads every
command's signature each time it builds the command tree (once per `labctl` process,
once per `CliRunner.invoke` in the tests), and a string annotation costs it an `eval`
there: 10 ms a build with them, 3 ms without.
"""
