"""One module per `arena` command: `add_arguments(parser)` defines its flags, `run(args)` runs it.

`cli.main.COMMANDS` lists them with their help lines. A command module imports nothing heavy
at its top (`arena --help` builds every command's parser); `run` imports what it needs.
"""
