"""The version of hangar, read by the build backend and by `hangar version`."""

__version__ = "0.1.0"
