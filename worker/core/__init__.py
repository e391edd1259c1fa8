"""The shared core: settings, errors (no HTTP codes) and the verdict and outcome types.

Both sides import it: the web side (``app``) and the grading side (the rest of ``worker``). It imports
nothing of ours, so neither side reaches the other through it.
"""
