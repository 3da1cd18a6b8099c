"""The package's version, in a leaf module (imports nothing) so that every module reads it without
importing the package face."""

__version__ = "0.1.0"
