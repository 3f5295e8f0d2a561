"""User-facing errors.

Every mistake a user can make in a recipe, a file or a command line ends up as a
`GrpoError`: the CLI prints its one-paragraph message (what is wrong, where, how to
fix it) and exits with code 2, without a traceback unless `--debug` is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Problem:
    """One thing wrong with the input, located by a recipe key path or a file."""

    where: str
    what: str
    fix: str = ""

    def render(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        if self.fix:
            text = f"{text.rstrip('.')}. {self.fix}"
        return text


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The closest valid name to a typo, or None when nothing is close: the start of many a fix sentence."""
    import difflib

    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.72)
    return matches[0] if matches else None


class GrpoError(Exception):
    """An error caused by the user's input; exit code 2."""

    exit_code = 2

    def __init__(self, what: str, *, where: str = "", fix: str = "") -> None:
        self.problems = [Problem(where, what, fix)]
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(p.render() for p in self.problems)


class RecipeError(GrpoError):
    """One or more problems found in a recipe; all are reported at once."""

    def __init__(self, problems: list[Problem], *, source: str = "", head: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        self.head = head
        Exception.__init__(self, self.render())

    def render(self) -> str:
        head = self.head or (f"Recipe {self.source} is not valid" if self.source else "The recipe is not valid")
        if len(self.problems) == 1:
            return f"{head}: {self.problems[0].render()}"
        lines = [f"{head} ({len(self.problems)} problems):"]
        lines += [f"  - {p.render()}" for p in self.problems]
        return "\n".join(lines)


class RewardTimeoutError(GrpoError):
    """A reward call ran past its `timeout`; carries the reward's label and the limit in seconds."""

    label: str = ""
    seconds: float = 0.0
