"""kconvert's version, in a module that imports nothing, so that any layer can name it."""
__version__ = "0.1.0"
