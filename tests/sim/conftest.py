import pytest


@pytest.fixture(scope="session")
def pair(models):
    """The pair most of the simulator's tests run: OPT-66B and its draft."""
    return models.pair("OPT-66B")
