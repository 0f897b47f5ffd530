"""The `arena` command line: parses arguments and calls into the packages (nothing imports it)."""
