"""`python -m nanum.cli`: the same command line as `nanum`."""

from nanum.cli import main

main()
