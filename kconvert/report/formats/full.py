"""`full`: the rich terminal view, drawn by each command itself (kconvert.report.terminal)."""
from kconvert.report.formats import Format, register

register(Format(name="full", help="the rich view", documents=("inspect", "fix", "verify", "score", "matrix"),
                render=None, extension="", server=True, rank=0))
