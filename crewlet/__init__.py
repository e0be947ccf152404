"""The composition root: the ``crewlet`` CLI and the node runner that mounts role services.

``shared`` (the core) and ``services`` (the roles) never import this package.
"""
