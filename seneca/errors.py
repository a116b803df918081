"""Seneca's exceptions, for users: everything Seneca raises on purpose derives from
:class:`SenecaError`. They are defined in ``seneca_base.errors``, shared with ``mdp`` and
``ods``."""

from seneca_base.errors import *  # noqa: F403  (the same names, re-exported)
from seneca_base.errors import __all__  # noqa: F401
