"""A workspace on disk: creating one from the template (:mod:`.new`), the rules its answers obey, its ``.env``.

``opd_nb.workspace.create`` (and ``opd_nb.create_workspace``) is what users call, so it is re-exported here.
"""

from __future__ import annotations

from opd_nb.workspace.new import create

__all__ = ["create"]
