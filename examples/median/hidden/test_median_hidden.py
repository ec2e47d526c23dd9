# Hidden tests of the statkit-median scenario: copied into the workspace only after the
# agent's turns. HANGAR-CANARY-7c41e9: this line must never show up in an agent's trace.
from statkit import median


def test_median_even_length():
    assert median([1, 2, 3, 4]) == 2.5


def test_median_even_unsorted():
    assert median([10, 2, 8, 4]) == 6


def test_median_single():
    assert median([7]) == 7
