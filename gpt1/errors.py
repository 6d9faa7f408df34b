"""The one base class of errors caused by input (config, data, files, arguments): the CLI prints their single
line, which names the key, file, row or field and the fix, instead of a traceback."""


class Gpt1Error(ValueError):
    pass
