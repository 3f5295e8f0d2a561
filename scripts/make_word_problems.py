"""Write the SmolLM2 demo's data: one-step arithmetic word problems, deterministic (seeded), as JSON lines.

    python scripts/make_word_problems.py            # -> recipes/data/word-arith/{train,test}.jsonl

Each row has `question` (a short story ending in a question) and `answer` (the integer). Additions and
subtractions of numbers up to 20, with names, objects and verbs drawn from small lists, so that a 135M
instruct model starts well above zero yet far from perfect. The test split uses stories whose (template, numbers)
never occur in train.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["Sam", "Mia", "Leo", "Ava", "Noah", "Emma", "Liam", "Zoe", "Omar", "Lena", "Ravi", "Ines"]
THINGS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "shells", "cards", "coins", "stamps"]
ADD = ["{n} has {a} {t}. {p} gets {b} more {t}. How many {t} does {n} have now?",
       "{n} had {a} {t} and found {b} more. How many {t} does {n} have in total?",
       "There are {a} {t} in a box. {n} puts in {b} more. How many {t} are in the box?"]
SUB = ["{n} has {a} {t}. {p} gives away {b} {t}. How many {t} does {n} have left?",
       "{n} had {a} {t} and lost {b} of them. How many {t} does {n} have now?",
       "There are {a} {t} on a table. {n} takes {b}. How many {t} are left on the table?"]


def _row(rng: random.Random) -> tuple[tuple[str, int, int], dict[str, str]]:
    subtract = rng.random() < 0.5
    template = rng.choice(SUB if subtract else ADD)
    a, b = rng.randint(2, 20), rng.randint(1, 12)
    if subtract and b >= a:
        a, b = b + rng.randint(1, 8), a
    name = rng.choice(NAMES)
    pronoun = "She" if name in ("Mia", "Ava", "Emma", "Zoe", "Lena", "Ines") else "He"
    question = template.format(n=name, p=pronoun, a=a, b=b, t=rng.choice(THINGS))
    return (template, a, b), {"question": question, "answer": str(a - b if subtract else a + b)}


def make(n_train: int, n_test: int, seed: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Deterministic splits; a test row never shares (template, a, b) with a train row."""
    rng = random.Random(seed)
    test: list[dict[str, str]] = []
    seen: set[tuple[str, int, int]] = set()
    while len(test) < n_test:
        key, row = _row(rng)
        if key not in seen:
            seen.add(key)
            test.append(row)
    train: list[dict[str, str]] = []
    while len(train) < n_train:
        key, row = _row(rng)
        if key not in seen:
            train.append(row)
    return train, test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "recipes/data/word-arith"))
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    train, test = make(args.train, args.test, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"wrote {len(train)} train and {len(test)} test rows to {out}")


if __name__ == "__main__":
    main()
