"""One module per `kubetrain` subcommand."""
