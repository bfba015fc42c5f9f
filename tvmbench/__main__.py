"""`python -m tvmbench`: the same CLI as the `tvmbench` command."""

from tvmbench.cli.main import main

main()
