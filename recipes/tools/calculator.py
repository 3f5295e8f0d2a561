"""The tool of recipes/tools-demo.yaml: exact integer addition."""


def add(a: int, b: int) -> int:
    """Add two integers exactly.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b
