"""gpt1: the GPT-1 paper (Radford et al., 2018) as a reproducible pipeline."""

__version__ = "0.1.0"
