"""Shared test set-up: figures draw off-screen, and every test's figures are closed after it."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Notebook tests first, in the order test_notebooks.py gives them (costliest first).

    `make test` runs `pytest --dist loadgroup`: each worker takes the next test as it frees up, in
    this order, so the long chapters start at once and the many short unit tests fill the gaps at
    the end, and both workers finish at about the same time.
    """
    items.sort(key=lambda item: item.get_closest_marker("notebook") is None)  # stable: order kept
