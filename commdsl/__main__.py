from commdsl.cli.main import entry

entry()
