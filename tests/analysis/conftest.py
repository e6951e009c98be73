import numpy as np
import pytest

# Hand-made 3 x 3 matrix (rows = trained through i, columns = evaluated on j); the expected
# statistics in the tests are worked out by hand in their comments.
HAND = np.array([[80.0, 70.0, 60.0],
                 [78.0, 82.0, 72.0],
                 [75.0, 79.0, 85.0]])


@pytest.fixture
def hand() -> np.ndarray:
    return HAND.copy()
