"""labctl: a lab runner for learners of the attention and Transformer-block chapters.

Importing this package is cheap on purpose: torch is imported only by the
commands that need it (`labctl.reference`, the labs).
"""

__version__ = "0.1.0"
