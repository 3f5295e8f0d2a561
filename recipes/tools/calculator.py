"""Calculator tools for the tool recipes: `add` (tools-demo.yaml) and `calculate` (tools-gsm8k-qwen3.yaml).

Tools are plain functions: type hints and the `Args:` docstring become the JSON schema the model sees.
A tool that raises is reported to the model as `{"error": "..."}` and counted in tools/failure_frequency.
"""

import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg,
        ast.UAdd: operator.pos}


def add(a: int, b: int) -> int:
    """Add two integers exactly.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "(48 / 2) * 3 + 7".
    """
    value = _eval(ast.parse(expression.replace(",", ""), mode="eval").body)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
