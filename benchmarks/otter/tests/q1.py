OK_FORMAT = True

IMPORT = ">>> from split_batch import split_batch\n"
CASES = [
    ">>> split_batch([1, 2, 3, 4, 5], 2)\n[[1, 2, 3], [4, 5]]",
    ">>> split_batch([], 2)\n[[], []]",
    ">>> split_batch([1, 2, 3, 4], 4)\n[[1], [2], [3], [4]]",
]
test = {
    "name": "q1",
    "points": 3,
    "suites": [
        {
            "cases": [{"code": IMPORT + case, "hidden": False, "locked": False} for case in CASES],
            "scored": True,
            "setup": "",
            "teardown": "",
            "type": "doctest",
        }
    ],
}
