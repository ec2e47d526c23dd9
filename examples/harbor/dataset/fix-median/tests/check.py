import json
import sys

sys.path.insert(0, "/app")
from stats import median

odd = [([3, 1, 2], 2), ([5], 5), ([9, 1, 5, 7, 3], 5)]
even = [([1, 2, 3, 4], 2.5), ([4, 1], 2.5), ([10, 0, 5, 5], 5)]


def share(cases):
    return sum(1 for values, want in cases if median(values) == want) / len(cases)


odd_share, even_share = share(odd), share(even)
print(
    json.dumps(
        {"reward": float(odd_share == even_share == 1.0), "odd": odd_share, "even": even_share}
    )
)
