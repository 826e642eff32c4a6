"""resel: run bags of compute tasks across several sites and finish them sooner."""

__version__ = "0.1.0"
