"""Code that runs ON the board (stdlib only, no imports from the rest of the package).

The controller also imports these modules so the board and the fleet share one parser for the
runtimes' output and one way of building their command lines.
"""
