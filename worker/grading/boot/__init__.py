"""Stand-alone scripts run as root on the way into a sandbox (``launch``, ``template``, ``entry``): stdlib only.

They are started as files (``python -I -S launch.py``, ``python template.py``), never imported by the rest of
the project, so each may import only the standard library and its siblings by their top-level names.
"""
