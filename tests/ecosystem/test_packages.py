"""The ecosystem environment is what constraints.txt pins: every pin, the frameworks' too."""

from importlib import metadata

import pytest

pytestmark = pytest.mark.ecosystem


def test_every_pin_is_installed_at_its_version():
    import test_packaging  # tests/ (on sys.path as the suite's root)

    for name, version in test_packaging._constraints().items():
        assert metadata.version(name) == version, name
